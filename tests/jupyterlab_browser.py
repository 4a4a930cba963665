"""Drive the notebooks the way a teacher does: JupyterLab on 127.0.0.1, a real headless Chromium.

``lab_server`` starts JupyterLab (a random free port, a random token) on a temporary copy of
``notebooks/``, with its settings, runtime and workspace folders in that temporary folder too, so
nothing is written into the repository or the user's home; kernels get ``PYTHONPATH`` = the
repository and ``MHSIM_NOTEBOOK_QUICK=1`` (tiny simulations) unless asked otherwise.
``browser_page`` opens Debian's Chromium (``/usr/bin/chromium``) through Playwright at
1280 × 720, a projector's size; Playwright downloads nothing. ``exercise_notebook`` opens one
notebook, runs it from the *Run* menu, moves every control of its widget once, presses the
widget's button and returns what a test asserts on (``Exercise``).

``tests/test_browser.py`` is the test; run this file to take the screenshots of
docs/teaching.md at the class's settings (minutes)::

    python tests/jupyterlab_browser.py docs/teaching
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from helpers import child_env, kernel_env

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path(os.environ.get("MHSIM_CHROMIUM", "/usr/bin/chromium"))
VIEWPORT = {"width": 1280, "height": 720}  # a projector
RUN_BUTTON = "Run Interact"
# The notebooks with a widget, the ones tests/test_browser.py runs in the browser. It starts
# JupyterLab under MPLBACKEND=Agg (a cluster's environment; CI's too): those notebooks' run under
# that backend is the browser's (tests/test_notebooks.py runs them headless under the inline one).
NOTEBOOKS = (
    "attention",
    "symmetry",
    "lazy_rich",
    "step_size",
    "quickstart",
    "emergence",
    "specialisation",
    "positional_semantic",
    "icl_heads",
)

# JupyterLab's user settings for the test: no news or update pop-ups over the notebook, and every
# cell kept in the page (no windowing), so the test sees every output.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    },
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Lab:
    url: str  # http://127.0.0.1:PORT
    token: str
    root: Path  # the folder JupyterLab serves: a copy of notebooks/
    log: Path  # the server's output

    def notebook_url(self, name: str) -> str:
        """The notebook alone in a fresh workspace of its own (no tabs left from another one)."""
        return f"{self.url}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={self.token}"

    def shutdown_kernels(self) -> None:
        """Stop every running kernel (one per notebook opened; each holds JAX and its compiles)."""
        auth = {"Authorization": f"token {self.token}"}
        with urllib.request.urlopen(urllib.request.Request(f"{self.url}/api/sessions", headers=auth)) as r:
            sessions = json.load(r)
        for s in sessions:
            req = urllib.request.Request(f"{self.url}/api/sessions/{s['id']}", method="DELETE", headers=auth)
            urllib.request.urlopen(req).close()


@contextlib.contextmanager
def lab_server(*, quick: bool = True, mplbackend: str | None = None, timeout: float = 90.0):
    """JupyterLab serving a temporary copy of notebooks/; stopped (its process group) at exit.

    ``mplbackend``: the MPLBACKEND of the environment JupyterLab starts from (and its kernels
    inherit), None for none; every notebook picks the inline backend itself, whatever it is."""
    tmp = Path(tempfile.mkdtemp(prefix="mhsim-lab-"))
    root = tmp / "notebooks"
    shutil.copytree(ROOT / "notebooks", root)
    settings_dir = tmp / "lab-settings"
    for name, value in LAB_SETTINGS.items():
        path = settings_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    # kernel_env: the users' XLA level, and the compile cache the headless notebook runs share
    env = kernel_env(child_env({k: v for k, v in os.environ.items() if k != "MPLBACKEND"}))
    if mplbackend is not None:
        env["MPLBACKEND"] = mplbackend
    if quick:
        env["MHSIM_NOTEBOOK_QUICK"] = "1"
    else:
        env.pop("MHSIM_NOTEBOOK_QUICK", None)
    env.update(
        JUPYTER_CONFIG_DIR=str(tmp / "config"),
        JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings_dir),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
        IPYTHONDIR=str(tmp / "ipython"),
        TMPDIR=str(tmp),  # what the notebooks write to a temporary folder goes with the rest
    )
    port, token = _free_port(), os.urandom(16).hex()
    log = tmp / "jupyterlab.log"
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: the kernel's own state (below)
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # CI runs as root
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    lab = Lab(f"http://127.0.0.1:{port}", token, root, log)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{lab.url}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not answer in {timeout:.0f} s") from None
                time.sleep(0.5)
        yield lab
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its kernels (its own session)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def browser_page():
    """A 1280 × 720 page in Debian's headless Chromium. A missing browser is an error, not a skip."""
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.exists():
        raise FileNotFoundError(
            f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium; .ci/run does)"
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            yield page
        finally:
            browser.close()


@dataclass
class Exercise:
    """What one notebook did in the browser."""

    name: str
    moved: list[str] = field(default_factory=list)  # the controls moved, with their old -> new value
    images_before: list[str] = field(default_factory=list)  # every figure (img src) before the press
    image_after: str | None = None  # the figure under the widget after the press
    widget_text: str = ""  # text printed under the widget after the press
    errors: list[str] = field(default_factory=list)  # tracebacks, widget errors anywhere on the page
    image_px: tuple[int, int] = (0, 0)  # the widget figure's (natural, displayed) width in px
    output_px: float = 0.0  # the width of the output area it sits in
    written: list[str] = field(default_factory=list)  # names the run added to the served folder
    seconds: float = 0.0


def _kernel_message(payload) -> str:
    """One kernel websocket frame in a line: channel, type, the message it answers, what it carries.
    JupyterLab speaks Jupyter Server's binary v1 protocol (offsets, channel, header, parent header,
    metadata, content, buffers) or, on older servers, JSON."""
    try:
        if isinstance(payload, str):
            m = json.loads(payload)
            channel, header, parent, content = m.get("channel"), m["header"], m["parent_header"], m["content"]
        else:
            n = int.from_bytes(payload[:8], "little")
            offsets = [int.from_bytes(payload[8 + 8 * i : 16 + 8 * i], "little") for i in range(n)]
            parts = [payload[a:b] for a, b in zip(offsets, offsets[1:], strict=False)]
            channel = parts[0].decode()
            header, parent, content = json.loads(parts[1]), json.loads(parts[2]), json.loads(parts[4])
    except (ValueError, KeyError, IndexError) as e:
        return f"(unreadable frame: {e!r:.60})"
    kind = header.get("msg_type")
    what = {
        "status": lambda: content.get("execution_state"),
        "display_data": lambda: ",".join(content.get("data", {})),
        "stream": lambda: f"{content.get('name')} {content.get('text', '')[:40]!r}",
        "error": lambda: content.get("ename"),
        "comm_msg": lambda: "{} {}".format(
            content.get("data", {}).get("method"), ",".join(content.get("data", {}).get("state", {}))
        ),
    }.get(kind, lambda: "")()
    return f"{channel} {kind} (answers {parent.get('msg_type')} {parent.get('msg_id', '')[-6:]}) {what}"


@contextlib.contextmanager
def _kernel_frames(page):
    """The kernel's frames as the page receives them (time, payload), while in the block; read
    (``_kernel_message``) only when a timeout is reported."""
    frames: list[tuple[float, bytes | str]] = []

    def watch(ws) -> None:
        if "/api/kernels/" in ws.url:
            ws.on("framereceived", lambda p: frames.append((time.monotonic(), p)))

    page.on("websocket", watch)
    try:
        yield frames
    finally:
        page.remove_listener("websocket", watch)


def _wait_for_kernel(page, *, dialog_seen: bool = False, timeout_ms: float = 60_000) -> str:
    """Returns "ready" once the notebook's kernel is connected and idle, or "dialog" when JupyterLab asks
    which kernel to start (unless ``dialog_seen``): the application's own state, window.jupyterapp."""
    return page.wait_for_function(
        """(dialogSeen) => {
            const asks = [...document.querySelectorAll('.jp-Dialog')]
                .some(d => d.textContent.includes('Select Kernel'));
            if (asks && !dialogSeen) return 'dialog';
            const kernel = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
            return kernel && kernel.connectionStatus === 'connected' && kernel.status === 'idle'
                && 'ready';
        }""",
        arg=dialog_seen,
        timeout=timeout_ms,
    ).json_value()


def _kernel_state(page) -> str:
    return page.evaluate(
        """() => {
            const k = window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel;
            return k ? `${k.connectionStatus}, ${k.status}` : 'none';
        }"""
    )


def _wait_until_idle(page, timeout_ms: float) -> None:
    """Every code cell has run: each prompt shows a number, none shows [*] or is empty."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            """() => {
                const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
            }""",
            timeout=timeout_ms,
        )
    except PlaywrightTimeout:
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        raise AssertionError(
            f"the cells did not all run in {timeout_ms / 1000:.0f} s: prompts {prompts}; "
            f"kernel {_kernel_state(page)}; errors on the page: {_errors(page)}"
        ) from None


def _what_came(page, output, received: list[tuple[float, bytes | str]]) -> str:
    """What a timeout after the press says: the outputs under the widget (their kinds, their text),
    the kernel's state, errors on the page, and the kernel's messages since the press (the last 60)."""
    outputs = output.locator(".jp-OutputArea-output")
    kinds = outputs.evaluate_all("os => os.map(o => o.getAttribute('data-mime-type'))")
    shown = "\n".join(outputs.all_inner_texts())[-1500:]
    messages = "\n".join(f"  {t:7.2f} s  {_kernel_message(p)}" for t, p in received[-60:])
    return (
        f"under the widget: {kinds} {shown!r}; kernel {_kernel_state(page)}; errors on the page: "
        f"{_errors(page)}; the kernel's messages since the press:\n{messages}"
    )


def _errors(page) -> list[str]:
    found = []
    for sel in (".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']", ".jp-RenderedText"):
        for text in page.locator(sel).all_inner_texts():
            if "Traceback" in text or "Error" in text.split("\n", 1)[0]:
                found.append(text[:2000])
    outputs = "\n".join(page.locator(".jp-OutputArea").all_inner_texts())  # not the markdown, which names it
    for marker in ("Error displaying widget", "model not found"):
        if marker in outputs:
            found.append(marker)
    return found


def _move_controls(page, interact) -> list[str]:
    """Move every control of the widget once, as a teacher would, at small settings."""
    moved = []
    # The first list (the H list, or the swept knob): one more value. Any further list (a widget
    # that sweeps one knob of several, refusing two swept at once) moves to another single value.
    for i in range(interact.locator("select[multiple]").count()):
        select = interact.locator("select[multiple]").nth(i)
        options = select.locator("option")
        chosen = select.evaluate("s => [...s.selectedOptions].map(o => o.value)")
        values = [options.nth(k).get_attribute("value") for k in range(options.count())]
        extra = next(v for v in values if v not in chosen)
        new = [*chosen, extra] if i == 0 else [extra]
        select.select_option(new)
        moved.append(f"select: {chosen} -> {new}")
    for i in range(interact.locator("select:not([multiple])").count()):  # a drop-down: the next entry
        select = interact.locator("select:not([multiple])").nth(i)
        old = select.input_value()
        values = select.evaluate("s => [...s.options].map(o => o.value)")
        new = values[(values.index(old) + 1) % len(values)]
        select.select_option(new)
        moved.append(f"dropdown: {old} -> {new}")
    sliders = interact.locator(".widget-slider")
    for i in range(sliders.count()):  # every slider one notch down (smaller: a quick run), by keyboard
        slider = sliders.nth(i)
        readout = slider.locator(".widget-readout")
        old = readout.inner_text()
        handle = slider.locator(".noUi-handle")
        handle.focus()
        handle.press("ArrowLeft")
        page.wait_for_timeout(300)
        new = readout.inner_text()
        if new == old:  # at its left end: one notch up
            handle.press("ArrowRight")
            page.wait_for_timeout(300)
            new = readout.inner_text()
        moved.append(f"{slider.locator('label').first.inner_text()}: {old} -> {new}")
    return moved


def exercise_notebook(page, lab: Lab, name: str, *, timeout_s: float = 240, screenshot: Path | None = None):
    """Open ``name``, run all cells from the Run menu, move every control, press the button."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    start = time.monotonic()
    result = Exercise(name)
    listing = lambda: {p.name for p in lab.root.iterdir() if not p.name.startswith(".")}  # noqa: E731
    before = listing()  # (JupyterLab's own folders are hidden ones: .ipynb_checkpoints)
    with _kernel_frames(page) as frames:  # for the message of a timeout after the press
        page.goto(lab.notebook_url(name))
        panel = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)")
        panel.locator(".jp-Notebook").wait_for(timeout=60_000)
        # The kernel must be up before the cells are run: JupyterLab may first ask which kernel to
        # start (the notebook names python3; take the one it offers). Whichever comes first is waited
        # for (a fixed wait for a dialog that does not come cost 10 s). The toolbar's status is no
        # sign: it reads Idle from the moment the notebook opens, before there is any kernel, and a
        # Run All pressed then ran nothing (2 notebooks of 7 in one CI run).
        dialog = page.locator(".jp-Dialog", has_text="Select Kernel")
        if _wait_for_kernel(page) == "dialog":
            dialog.locator("button", has_text="Select").click()
            _wait_for_kernel(page, dialog_seen=True)
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.locator(".lm-Menu-item", has_text="Run All Cells").first.click()
        _wait_until_idle(page, timeout_s * 1000)
        interact = panel.locator(".widget-interact").last
        interact.wait_for(timeout=30_000)
        images = panel.locator(".jp-OutputArea img")
        result.images_before = images.evaluate_all("imgs => imgs.map(i => i.src)")
        result.moved = _move_controls(page, interact)
        output = interact.locator(".widget-output")
        button = interact.locator("button", has_text=RUN_BUTTON)
        button.scroll_into_view_if_needed()
        pressed, first = time.monotonic(), len(frames)
        button.click()
        # Wait for a figure under the widget that was not on the page before the press.
        try:
            page.wait_for_function(
                """([root, before]) => {
                    const imgs = [...root.querySelectorAll('.widget-output img')];
                    return imgs.some(i => !before.includes(i.src) && i.complete && i.naturalWidth > 0);
                }""",
                arg=[interact.element_handle(), result.images_before],
                timeout=timeout_s * 1000,
            )
        except PlaywrightTimeout:  # say what the page shows instead
            raise AssertionError(
                f"{name}: no new figure {timeout_s:.0f} s after the press; "
                + _what_came(page, output, [(t - pressed, p) for t, p in frames[first:]])
            ) from None
    page.wait_for_timeout(500)
    img = output.locator("img").last
    result.image_after = img.get_attribute("src")
    img.scroll_into_view_if_needed()
    result.image_px = tuple(img.evaluate("i => [i.naturalWidth, i.getBoundingClientRect().width]"))
    result.output_px = output.evaluate("o => o.getBoundingClientRect().width")
    result.widget_text = "\n".join(output.locator(".jp-RenderedText").all_inner_texts())
    result.errors = _errors(page)
    result.written = sorted(listing() - before)
    if screenshot is not None:
        img.evaluate("i => i.scrollIntoView({block: 'end'})")  # the whole figure, the controls above it
        page.screenshot(path=str(screenshot))
    result.seconds = time.monotonic() - start
    return result


def _screenshots(out: Path) -> None:
    """The docs' screenshots: each notebook at the class's settings after one move of every control."""
    out.mkdir(parents=True, exist_ok=True)
    with lab_server(quick=False) as lab, browser_page() as page:
        for name in ("attention", "symmetry", "lazy_rich", "step_size"):
            r = exercise_notebook(page, lab, name, timeout_s=600, screenshot=out / f"notebook-{name}.png")
            print(f"{name}: {r.seconds:.0f} s, moved {r.moved}, errors {r.errors}")


if __name__ == "__main__":
    _screenshots(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "teaching")
