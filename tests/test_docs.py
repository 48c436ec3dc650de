"""Every example in docs/*.md and README.md runs, and prints what the document says.

The convention for code blocks in the documentation:

* A ```` ```python ```` block is executed. The blocks of one document run in
  order, in one namespace, in a fresh Python process whose working directory
  is a scratch directory that links to the repository's top-level entries
  (so ``examples/...`` and ``tests/data/...`` resolve, and files the examples
  write land outside the repository). Code is compiled with the document's
  path and line numbers, so source locations JAX records read
  ``tools.md:42 (f)`` and tools can show the line's text.
* An ```` ```output ```` block right after a python block is what that block
  prints (stdout); without one, the block must just run without error.
* A ```` ```console ```` block holds shell commands, each on a line starting
  with ``$ ``, followed by the output it prints (stdout). ``stablehlo-interp``
  and ``python`` are this environment's.
* In expected output, ``...`` matches any text (as doctest's ELLIPSIS), for
  what changes from run to run (timings).
* Other blocks (```` ```py ```` for sketches that are not meant to run,
  ```` ```bash ```` for setup steps, ```` ```mlir ````, ```` ```text ````) are
  shown, not run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCUMENTS = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
# Documents written before this convention that do not follow it yet (strict:
# once fixed, the entry must go).


@dataclass
class Block:
    kind: str           # "python", "console" or "output"
    line: int           # line of the block's first code line in the document
    code: str
    expected: str | None = None


def blocks(path: pathlib.Path) -> list[Block]:
    """The runnable blocks of a document, python blocks with their expected output."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        match = re.match(r"^```(\w*)\s*$", lines[index])
        if not match:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        kind, code = match.group(1), "\n".join(lines[index + 1:end]) + "\n"
        if kind == "output":
            if not found or found[-1].kind != "python" or found[-1].expected is not None:
                raise AssertionError(f"{path.name}:{index + 1}: an output block must follow a python block")
            found[-1].expected = code
        elif kind in ("python", "console"):
            found.append(Block(kind, index + 2, code))
        index = end + 1
    return found


# ------------------------------------------------------------ the child process


def run_document(path: pathlib.Path) -> list[dict]:
    """Run a document's blocks in order; for each, what it printed and any error."""
    namespace = {"__name__": "__main__"}
    results = []
    for block in blocks(path):
        if block.kind == "python":
            output, error = _run_python(block, path, namespace)
        else:
            output, error = _run_console(block.code), None
        results.append({"line": block.line, "output": output, "error": error})
        if error:
            break
    return results


def _run_python(block: Block, path: pathlib.Path, namespace: dict):
    code = compile("\n" * (block.line - 1) + block.code, str(path), "exec")
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            exec(code, namespace)
    except BaseException:  # noqa: BLE001 - reported to the parent
        return stdout.getvalue(), traceback.format_exc()
    return stdout.getvalue(), None


def _run_console(code: str) -> str:
    """Each ``$ command`` of a console block and its stdout, in the block's own format."""
    transcript = []
    for line in code.splitlines():
        if line.startswith("$ "):
            command = line[2:]
            result = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=600)
            transcript.append(line)
            transcript.extend(result.stdout.rstrip("\n").splitlines())
    return "\n".join(transcript) + "\n"


# ------------------------------------------------------------------ the tests


def matches(actual: str, expected: str) -> bool:
    """``actual`` is ``expected`` with each ``...`` standing for any text. Matched part by
    part, leftmost first, which is exact for such patterns and linear in the text (a regular
    expression of lazy wildcards backtracks for hours on a long output that does not match)."""
    actual, expected = _normalize(actual), _normalize(expected)
    if "..." not in expected:
        return actual == expected
    first, *middle, last = expected.split("...")
    if not actual.startswith(first) or len(actual) < len(first) + len(last):
        return False
    position, end = len(first), len(actual) - len(last)
    for part in middle:
        position = actual.find(part, position, end)
        if position < 0:
            return False
        position += len(part)
    return actual.endswith(last)


def test_matches_reads_ellipses_as_any_text():
    assert matches("a 1 b 22 c", "a ... b ... c") and matches("abc", "a...c") and matches("ac", "a...c")
    assert not matches("a 1 b 22", "a ... b ... c") and not matches("abc", "ab...bc")
    assert matches("x y x y z", "x...y z") and not matches("b a", "a...b")
    # a long output that does not match: answered at once (a lazy-wildcard regex ran for hours)
    assert not matches("x" * 100_000, "..." + "x..." * 30 + "y")


def _normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    directory = tmp_path_factory.mktemp("docs")
    for entry in ROOT.iterdir():
        if not entry.name.startswith("."):
            (directory / entry.name).symlink_to(entry)
    return directory


def _document_parameter(path: pathlib.Path):
    name = str(path.relative_to(ROOT))
    return pytest.param(path, id=name)


@pytest.mark.timeout(1900)   # above the child's own limit, which reports the document
@pytest.mark.parametrize("document", [_document_parameter(p) for p in DOCUMENTS])
def test_document(document, scratch, tmp_path):
    name = str(document.relative_to(ROOT))
    expected = blocks(document)
    if not expected:
        pytest.skip("no runnable blocks")
    report = tmp_path / "results.json"
    environment = dict(os.environ, PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                       TF_CPP_MIN_LOG_LEVEL="3")
    child = subprocess.run([sys.executable, __file__, str(document), str(report)], cwd=scratch, env=environment,
                           capture_output=True, text=True, timeout=1800)
    assert child.returncode == 0, child.stderr
    results = json.loads(report.read_text())
    for block, result in zip(expected, results):
        where = f"{name}:{block.line}"
        assert result["error"] is None, f"{where}: the example fails:\n{result['error']}"
        wanted = block.expected if block.kind == "python" else block.code
        if wanted is not None:
            assert matches(result["output"], wanted), (
                f"{where}: the example prints\n{result['output']}\ninstead of\n{wanted}")
    assert len(results) == len(expected)
    for entry in _explorer_pages(name):
        if "model_explorer" in entry:
            written = entry["model_explorer"]
            fingerprint = model_explorer_fingerprint(scratch / written)
        else:
            written, fingerprint = entry["page"], explorer_page_fingerprint(scratch / entry["page"])
        assert fingerprint == entry["sha256"], (
            f"{name}: the explorer page {written} changed since {entry['screenshot']} was taken: "
            "run `python docs/screenshots.py` and commit the new screenshots")
        assert (ROOT / entry["screenshot"]).is_file()


def explorer_page_fingerprint(page: pathlib.Path) -> str:
    """SHA-256 of an explorer page without the whole arrays it keeps for "show all
    values": their last digits may vary with the machine's NumPy kernels, and the
    screenshots show the summaries (5 digits), which are kept; and without its source
    files' absolute paths, which differ between clones (their names and lines are kept)."""
    text = page.read_text(encoding="utf-8")
    marker = '<script type="application/json" id="explorer-data">'
    start = text.index(marker) + len(marker)
    end = text.index("</script>", start)
    data = json.loads(text[start:end])
    for record in data["records"]["ops"]:
        for value in record["res"] or ():
            value.pop("full")
    for value in data["records"]["arguments"]:
        value.pop("full")
    for arguments in data.get("devices", {}).get("arguments", ()):   # a per-device page's
        for value in arguments:
            value.pop("full")
    for source in data.get("files", ()):
        source.pop("path")
    canonical = text[:start] + json.dumps(data, sort_keys=True) + text[end:]
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def model_explorer_fingerprint(directory: pathlib.Path) -> str:
    """SHA-256 of the node data written for Model Explorer in ``directory``, its numbers
    to 5 significant digits (as the screenshot shows them; the last digits of an
    op's values may vary with the machine's NumPy kernels). The module's text names
    the documents' paths, which differ between clones: its node ids stand for it."""
    files = {path.name: json.loads(path.read_text(encoding="utf-8"), parse_float=lambda text: f"{float(text):.5g}")
             for path in sorted(directory.glob("*.json"))}
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode("utf-8")).hexdigest()


def _explorer_pages(document: str) -> list[dict]:
    """The explorer pages a document's examples write, with the hashes of those in its screenshots."""
    manifest = json.loads((ROOT / "docs" / "images" / "explorer_pages.json").read_text())
    return [entry for entry in manifest if entry["document"] == document]


def test_explorer_screenshots_cover_the_documents():
    """Every page the screenshot script takes is listed with the document that writes it."""
    manifest = json.loads((ROOT / "docs" / "images" / "explorer_pages.json").read_text())
    for entry in manifest:
        text = (ROOT / entry["document"]).read_text(encoding="utf-8")
        written = (f'model_explorer="{entry["model_explorer"]}"' if "model_explorer" in entry
                   else f'path="{entry["page"]}"')
        assert written in text, entry
        assert entry["screenshot"].removeprefix("docs/") in text, entry


def test_block_parsing_and_matching(tmp_path):
    document = tmp_path / "doc.md"
    document.write_text("text\n```python\nprint(1)\n```\n\n```output\n1\n```\n```py\nsketch\n```\n"
                        "```console\n$ echo hi\nhi\n```\n")
    assert [asdict(b) for b in blocks(document)] == [
        {"kind": "python", "line": 3, "code": "print(1)\n", "expected": "1\n"},
        {"kind": "console", "line": 13, "code": "$ echo hi\nhi\n", "expected": None},
    ]
    assert run_document(document) == [{"line": 3, "output": "1\n", "error": None},
                                      {"line": 13, "output": "$ echo hi\nhi\n", "error": None}]
    assert matches("17 passed in 3.2s\n", "17 passed in ...s") and not matches("1\n2", "1")


if __name__ == "__main__":
    document_path, report_path = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    report_path.write_text(json.dumps(run_document(document_path)))
