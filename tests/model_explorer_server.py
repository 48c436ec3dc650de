"""Model Explorer's own server on a module and node-data files, in a child process with
a deadline (for the overlays' tests and docs/screenshots.py).

    with ModelExplorerServer(files.module, files.overlays.values()) as server:
        server.url          # the page that opens the module with the node data
        server.command(...) # an extension command, as the UI sends it

The child is Model Explorer's command line (``model-explorer FILE
--node_data_paths=...``) with its check for a newer release turned off (it asks
the package index and GitHub: no network here) and no browser opened.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

from child_deadline import Deadline

START_SECONDS = 120
_CHILD = """
import sys
from model_explorer import server
server._check_new_version = lambda print_msg=True: {"version": "", "runningVersion": "", "releaseUrl": "",
                                                    "desktopAppUrl": ""}
sys.argv = ["model-explorer", *sys.argv[1:]]
from model_explorer import cmdline
cmdline.main()
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ModelExplorerServer:
    """The server, started on entry (its page's URL in ``url``), ended on exit."""

    def __init__(self, module, node_data=(), extensions=()):
        self.port = free_port()
        arguments = [str(module), "--host=127.0.0.1", f"--port={self.port}", "--no_open_in_browser"]
        if node_data:
            arguments.append("--node_data_paths=" + ",".join(map(str, node_data)))
        if extensions:
            arguments.append("--extensions=" + ",".join(extensions))
        self.arguments = arguments
        self.url = None
        self.output: list[str] = []

    def __enter__(self) -> "ModelExplorerServer":
        self.process = subprocess.Popen([sys.executable, "-u", "-c", _CHILD, *self.arguments], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)
        with Deadline(self.process, START_SECONDS) as deadline:
            for line in self.process.stdout:
                self.output.append(line)
                if line.startswith(f"http://127.0.0.1:{self.port}"):
                    self.url = line.strip()
                    break
        if self.url is None:
            self.process.kill()
            self.process.wait(timeout=30)
            why = f"not started in {START_SECONDS} s" if deadline.expired else "ended"
            raise RuntimeError(f"Model Explorer's server {why}; it printed:\n{''.join(self.output)}")
        return self

    def command(self, command: dict, seconds: float = 300) -> dict:
        """An extension command as the UI sends it (``/api/v1/send_command``), its answer."""
        query = urllib.parse.urlencode({"json": json.dumps(command)})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/send_command?{query}",
                                    timeout=seconds) as answer:
            return json.loads(answer.read())

    def __exit__(self, *error) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        self.process.stdout.close()
