"""``si.explore`` in a real notebook: a notebook built with nbformat, executed by nbclient
on a real IPython kernel (ipykernel, running this interpreter and this checkout's
package), and the cell's output opened in Chromium (Debian's, driven by Playwright as in
test_explorer_browser.py; those tests skip without it).

The notebook is executed once per module; its outputs are what a Jupyter front end
receives and shows.
"""

import os
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablehlo_interp as si
from browser import CHROMIUM, chromium, iframe_pages
from oracles import run_xla

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
kernelspec = pytest.importorskip("ipykernel.kernelspec")

CHECKOUT = pathlib.Path(si.__file__).resolve().parent.parent

EXPLORE_CELL = """\
import jax
import jax.numpy as jnp
import numpy as np
import stablehlo_interp as si

@jax.jit
def layer(x, w):
    return jnp.tanh(x @ w).sum(0)

x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
w = np.ones((4, 5), np.float32) / 4
exploration = si.explore(layer, x, w)
exploration"""

# the cell's inputs and function, for the oracle
X = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
W = np.ones((4, 5), np.float32) / 4


def layer(x, w):
    return jnp.tanh(x @ w).sum(0)


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """The executed notebook: the explore cell, then a cell writing the kernel's
    ``exploration.html`` to ``page.html`` and printing which package it imported."""
    folder = tmp_path_factory.mktemp("notebook")
    cells = [nbformat.v4.new_code_cell(EXPLORE_CELL),
             nbformat.v4.new_code_cell("import pathlib\n"
                                       "pathlib.Path('page.html').write_text(exploration.html, encoding='utf-8')\n"
                                       "print(si.__file__)")]
    executed = nbformat.v4.new_notebook(cells=cells)
    nbclient.NotebookClient(executed, km=_kernel_manager(folder), timeout=120,
                            resources={"metadata": {"path": str(folder)}}).execute(env=_kernel_environment(folder))
    return executed, folder


def _kernel_manager(folder: pathlib.Path):
    """A manager for the kernel ``python3`` whose spec (written here) runs this
    interpreter: not whatever spec of that name the user's or the system's Jupyter
    folders hold. Its connection file is in ``folder`` too (a CI home may be read-only)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    kernels = folder / "kernels"
    kernelspec.write_kernel_spec(kernels / "python3")
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]),
                              connection_file=str(folder / "connection.json"))


def _kernel_environment(folder: pathlib.Path) -> dict[str, str]:
    """This process's environment, with this checkout first on the kernel's path (an
    installed copy of the package may be another checkout's), and IPython's and
    Jupyter's own folders in ``folder`` (no user profile's startup files run)."""
    path = os.pathsep.join(filter(None, [str(CHECKOUT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "IPYTHONDIR": str(folder / "ipython"),
            "JUPYTER_RUNTIME_DIR": str(folder / "runtime"), "JUPYTER_CONFIG_DIR": str(folder / "config")}


def shown_html(notebook) -> str:
    """The explore cell's rich output: what Jupyter puts in the page."""
    executed, _ = notebook
    (result,) = [output for output in executed.cells[0].outputs if output.output_type == "execute_result"]
    return result.data["text/html"]


def test_the_notebook_shows_the_explorer_page_inline(notebook):
    executed, folder = notebook
    printed = executed.cells[1].outputs[0]
    assert printed.output_type == "stream" and printed.text.strip() == si.__file__   # this checkout's package
    # the same page a browser opens, whole, inside the frame (its script and styles stay there)
    assert iframe_pages(shown_html(notebook)) == [(folder / "page.html").read_text(encoding="utf-8")]


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="no Chromium at /usr/bin/chromium")
def test_the_notebooks_output_draws_the_graph_in_chromium(notebook, tmp_path):
    pytest.importorskip("playwright.sync_api")
    output = tmp_path / "output.html"
    output.write_text(f"<!DOCTYPE html><html><body>{shown_html(notebook)}</body></html>", encoding="utf-8")
    lowered = jax.jit(layer).lower(X, W).as_text()
    module_ops = set(re.findall(r"\b(stablehlo\.\w+)", lowered)) - {"stablehlo.return"}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        errors = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(output.as_uri())
        frame = page.frame_locator("iframe")
        frame.locator(".node .opname", has_text="stablehlo.tanh").wait_for()
        drawn = set(frame.locator(".node > .opname").all_text_contents())
        assert {name for name in drawn if name.startswith("stablehlo.")} == module_ops
        assert {"stablehlo.dot_general", "stablehlo.tanh", "stablehlo.reduce", "x", "w"} <= drawn  # named arguments
        # the cell's own line (IPython keeps the cell's source) selects its ops, and the tanh shows its values
        frame.locator("#python .line", has_text="jnp.tanh(x @ w)").click()
        assert set(frame.locator(".node.hl > .opname").all_text_contents()) == module_ops
        frame.locator(".node", has=frame.locator(".opname", has_text="stablehlo.tanh")).click()
        details = frame.locator("#details").inner_text()
        expected = run_xla(lambda x, w: jnp.tanh(x @ w), X, W)[0]
        assert f"result #0: f32[3,5]\n{si.tools.summarize(expected)}" in details
        assert errors == []
