"""The web console in a real browser (Debian's chromium, driven by Selenium).

One server (HTTP port on, static tokens) with a remote lifecycle plugin that
rejects one tool: log in, find a thread by metadata, see hidden messages
marked, send a message and watch the run stream to completion, approve a
pending tool call and see the run resume, and find the remote hook's
decision on the run's timeline. Screenshots are written under the test's
tmp dir and, when TEST_ARTIFACTS is set, there too.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pai.v1 import admin_service_pb2, admin_service_pb2_grpc, run_service_pb2, thread_service_pb2
from pai_grpc.convert import struct_to_proto
from pai_grpc.domain import ToolModelMessage, UserModelMessage
from pai_grpc.lifecycle import BeforeToolCallInput, Continue, Reject, lifecycle
from pai_grpc.models import ModelCall, ScriptedModel, last_user_text, tool_call_step
from pai_grpc.plugin_sdk import serve_plugin
from pai_grpc.plugins import HookHost, PluginConfig, RemoteLifecycle
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry
from pai_grpc.testing import InProcessServer, serve_in_process
from pai_grpc.tools import ToolContext, client_tool, tool

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ADMIN_TOKEN = "console-admin"
AUTH = (("authorization", f"Bearer {ADMIN_TOKEN}"),)
WAIT_S = 20


def _install_browser() -> str | None:
    """Install chromium and chromium-driver with apt-get when missing; why not, or None."""
    if os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "chromium/chromium-driver are missing and apt-get cannot run as root here"
    for command in (
        ["apt-get", "update", "-qq"],
        [
            "apt-get",
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            "chromium",
            "chromium-driver",
        ],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            return f"{' '.join(command)} failed: {done.stderr[-500:]}"
    return None


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    problem = _install_browser()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as e:
        problem = problem or f"selenium is not installed: {e}"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the console browser tests need chromium in CI: {problem}")
        pytest.skip(f"BROWSER UNAVAILABLE, console browser tests SKIPPED: {problem}")
    os.environ.setdefault("SE_OFFLINE", "true")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    browser = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield browser
    finally:
        browser.quit()


class Target(BaseModel):
    path: str


@tool(approval=True, description="Delete a file.")
async def delete_file(value: Target, ctx: ToolContext) -> str:
    return f"deleted {value.path}"


@tool(description="Read a file.")
async def read_file(value: Target, ctx: ToolContext) -> str:
    return "secret"


pick_color = client_tool("pick_color", description="Ask the user for a colour.")


def _tool_outputs(call: ModelCall) -> list[Any]:
    """The tool outputs of the current turn (after the last user message)."""
    last_user = max(
        (i for i, m in enumerate(call.messages) if isinstance(m, UserModelMessage)), default=-1
    )
    return [
        part.output
        for m in call.messages[last_user + 1 :]
        if isinstance(m, ToolModelMessage)
        for part in m.content
    ]


def script(call: ModelCall) -> Any:
    said = last_user_text(call.messages) or ""
    outputs = _tool_outputs(call)
    if said == "choose":
        if not outputs:
            return tool_call_step(("p1", "pick_color", {}))
        return f"you chose {outputs[0].value}"
    if said.startswith("delete"):
        if not outputs:
            return tool_call_step(("d1", "delete_file", {"path": said.split()[-1]}))
        return f"delete outcome: {outputs[0].type}"
    if said.startswith("clean up") and not outputs:
        return tool_call_step(
            ("c1", "delete_file", {"path": "notes.txt"}),
            ("c2", "read_file", {"path": "/etc"}),
            text="about to clean up. ",
        )
    if said.startswith("clean up"):
        return "cleanup finished"
    return f"streamed reply to {said}"


def guard(i: BeforeToolCallInput) -> Any:
    """The remote policy: reading files is refused."""
    if i.tool is not None and i.tool.name == "read_file":
        return Reject("reading files is refused by the remote policy")
    return Continue()


@pytest.fixture
async def console_server(sqlite_url: str) -> AsyncIterator[InProcessServer]:
    host = HookHost()
    plugin = await serve_plugin(lifecycle("policy", before_tool_call=guard))
    remote = RemoteLifecycle(PluginConfig(address=plugin.address, timeout=15.0), host)
    await remote.connect()
    model = ScriptedModel(script, chunk_delay=0.03)
    agents = AgentRegistry(
        [
            Agent(
                name=DEFAULT_AGENT,
                model=model,
                tools=[delete_file, read_file, pick_color],
                lifecycle=remote,
            )
        ]
    )
    try:
        async with serve_in_process(
            sqlite_url,
            agents=agents,
            http_address="127.0.0.1:0",
            admin_tokens={ADMIN_TOKEN: "acme"},
            sends_per_second=0,
        ) as srv:
            yield srv
    finally:
        await remote.close()
        await plugin.stop(0.5)
        await host.close()


class Shots:
    """Screenshots under the test's tmp dir (and TEST_ARTIFACTS when set)."""

    def __init__(self, driver: Any, tmp_path: Path) -> None:
        self.driver = driver
        self.dirs = [tmp_path / "screenshots"]
        if os.environ.get("TEST_ARTIFACTS"):
            self.dirs.append(Path(os.environ["TEST_ARTIFACTS"]) / "console")
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)

    def __call__(self, name: str) -> None:
        png = self.driver.get_screenshot_as_png()
        for d in self.dirs:
            (d / f"{name}.png").write_bytes(png)


def _wait(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(condition, message=what)


def browse(driver: Any, base: str, shots: Shots, drop_streams: Callable[[], int]) -> dict[str, Any]:
    """The user's session in the browser (runs in a thread: the server is in the loop)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    # Read and click through the DOM by selector at the moment of use: views
    # re-render as events arrive, so element handles go stale.
    def text(selector: str) -> str:
        found = driver.execute_script(
            "const n = document.querySelector(arguments[0]); return n ? n.innerText : null;",
            selector,
        )
        return str(found) if found is not None else ""

    def click(selector: str) -> None:
        driver.execute_script("document.querySelector(arguments[0]).click()", selector)

    def done_with(status: str) -> Callable[[Any], bool]:
        def check(d: Any) -> bool:
            live = d.find_elements(By.CSS_SELECTOR, "#live-status[data-done='true']")
            return bool(live) and text("#run-status") == status

        return check

    seen: dict[str, Any] = {}
    driver.get(f"{base}/console/")
    _wait(driver, lambda d: text("#who") == "Not signed in", "the login form")
    # Keyboard only: type the token and press Enter.
    driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN, Keys.ENTER)
    _wait(driver, lambda d: text("#who") == "Signed in", "signed in")
    seen["token_in_page"] = ADMIN_TOKEN in driver.page_source
    _wait(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "a.thread-link")) == 2, "threads")
    driver.find_element(By.ID, "filter-metadata").send_keys("project=apollo", Keys.ENTER)
    links = driver.find_elements(By.CSS_SELECTOR, "a.thread-link")
    seen["filtered"] = [link.text for link in links]
    shots("01-threads")
    links[0].click()

    # The transcript marks the hidden message.
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript li"), "the transcript")
    seen["hidden"] = [
        li.get_attribute("data-hidden")
        for li in driver.find_elements(By.CSS_SELECTOR, "#transcript li")
    ]
    shots("02-thread")

    # Send, then watch the run stream live to completion.
    driver.find_element(By.ID, "send-text").send_keys("hello browser")
    driver.find_element(By.CSS_SELECTOR, "#send-form button[type=submit]").click()
    _wait(driver, done_with("completed"), "the first run completes")
    seen["live_text"] = text("#live-text")
    shots("03-run-streamed")

    # A run that waits for approval; the remote hook rejects the other call.
    click("#run-head a")
    _wait(driver, lambda d: d.find_elements(By.ID, "send-text"), "the thread view")
    driver.find_element(By.ID, "send-text").send_keys("clean up please")
    driver.find_element(By.CSS_SELECTOR, "#send-form button[type=submit]").click()
    approve = "li.pending[data-kind='approval'] .approve"
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, approve), "the approval")
    _wait(driver, lambda d: text("#run-status") == "waiting", "the run waits")
    seen["waiting_status"] = text("#run-status")
    shots("04-pending-approval")
    # The server ends the open stream (as a drain does): the console resumes after its seq.
    seen["dropped"] = drop_streams()
    _wait(
        driver,
        lambda d: text("#live-status").startswith("reconnecting"),
        "the console sees the drop",
    )
    click(approve)
    _wait(driver, done_with("completed"), "the resumed run completes")
    seen["resumed_text"] = text("#live-text")
    seen["reconnects"] = driver.execute_script(
        "return document.getElementById('live-status').dataset.reconnects"
    )
    seen["timeline"] = driver.execute_script(
        "return [...document.querySelectorAll('#timeline-list li')]"
        ".map((li) => [li.dataset.kind, li.innerText]);"
    )
    shots("05-timeline")
    return seen


async def test_console_in_a_browser(
    console_server: InProcessServer, driver: Any, tmp_path: Path
) -> None:
    srv = console_server
    threads = []
    for project in ("apollo", "zeus"):
        created = await srv.threads.CreateThread(
            thread_service_pb2.CreateThreadRequest(metadata=struct_to_proto({"project": project})),
            metadata=AUTH,
        )
        threads.append(created.thread.id)
    apollo = threads[0]
    # Two messages, the first then hidden from the transcript (an operator's rewrite).
    sent = await srv.threads.Send(
        thread_service_pb2.SendRequest(
            thread_id=apollo, parts=[{"text": {"text": "first question"}}]
        ),
        metadata=AUTH,
    )
    async for _ in srv.runs.StreamRun(
        run_service_pb2.StreamRunRequest(run_id=sent.run.run_id),
        metadata=AUTH,
    ):
        pass
    admin = admin_service_pb2_grpc.AdminServiceStub(srv.channel)
    await admin.UpdateMessageVisibility(
        admin_service_pb2.UpdateMessageVisibilityRequest(
            thread_id=apollo, message_ids=[sent.run.message_id], transcript=False
        ),
        metadata=AUTH,
    )

    base = f"http://127.0.0.1:{srv.app.http_port}"
    loop = asyncio.get_running_loop()

    async def cancel() -> int:
        assert srv.app.http is not None
        return len(srv.app.http.cancel_calls())

    def drop_streams() -> int:
        return asyncio.run_coroutine_threadsafe(cancel(), loop).result(timeout=10)

    seen = await asyncio.to_thread(browse, driver, base, Shots(driver, tmp_path), drop_streams)

    assert seen["token_in_page"] is False, "the token is never written into the page"
    assert seen["filtered"] == [apollo]
    assert seen["hidden"] == ["true", "false"]
    assert seen["live_text"] == "streamed reply to hello browser"
    assert seen["waiting_status"] == "waiting"
    # At least the run's stream was cut (a thread watch the page keeps may be cut with it).
    assert seen["dropped"] >= 1
    assert seen["reconnects"] == "1"
    # Resumed by seq: the text before the drop once, then the rest.
    assert seen["resumed_text"] == "about to clean up. cleanup finished", seen["timeline"]
    kinds = [kind for kind, _ in seen["timeline"]]
    assert "model call" in kinds
    assert "tool result" in kinds
    rejected = "tool error read_file: reading files is refused by the remote policy"
    assert ["tool error", rejected] in [[k, t.split(" (")[0]] for k, t in seen["timeline"]], seen[
        "timeline"
    ]
    # Each remote hook call is on the timeline with its decision (and its latency).
    hooks = [t.split(" (")[0] for k, t in seen["timeline"] if k == "hook"]
    assert "hook before_tool_call policy → reject" in hooks, seen["timeline"]
    assert "hook before_tool_call policy → none" in hooks, seen["timeline"]  # a plain continue
    assert (tmp_path / "screenshots" / "05-timeline.png").stat().st_size > 0


def act(driver: Any, base: str, thread_id: str, shots: Shots) -> dict[str, Any]:
    """Client-tool result entry, Deny with a reason, Cancel and Regenerate, in the browser."""
    from selenium.webdriver.common.by import By

    def text(selector: str) -> str:
        found = driver.execute_script(
            "const n = document.querySelector(arguments[0]); return n ? n.innerText : null;",
            selector,
        )
        return str(found) if found is not None else ""

    def click(selector: str) -> None:
        driver.execute_script("document.querySelector(arguments[0]).click()", selector)

    def run_with(status: str) -> Callable[[Any], bool]:
        return lambda d: text("#run-status") == status

    def send(message: str) -> None:
        driver.get(f"{base}/console/#/threads/{thread_id}")
        _wait(driver, lambda d: d.find_elements(By.ID, "send-text"), "the thread view")
        driver.find_element(By.ID, "send-text").send_keys(message)
        click("#send-form button[type=submit]")
        _wait(driver, lambda d: d.find_elements(By.ID, "live-status"), "the run view")

    seen: dict[str, Any] = {}
    driver.get(f"{base}/console/")
    driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
    click("#sign-in")

    send("choose")
    result = "li.pending[data-kind='client_tool'] textarea.tool-result"
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, result), "the client tool")
    driver.find_element(By.CSS_SELECTOR, result).send_keys('"blue"')
    click("li.pending[data-kind='client_tool'] .submit-result")
    _wait(driver, run_with("completed"), "the client tool's run completes")
    _wait(driver, lambda d: text("#live-text") == "you chose blue", "the answer")
    shots("11-client-tool")

    send("delete notes.txt")
    reason = "li.pending[data-kind='approval'] input.deny-reason"
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, reason), "the approval")
    driver.find_element(By.CSS_SELECTOR, reason).send_keys("not today")
    click("li.pending[data-kind='approval'] .deny")
    _wait(driver, run_with("completed"), "the denied run completes")
    _wait(driver, lambda d: text("#live-text") == "delete outcome: execution-denied", "the answer")
    seen["denied_timeline"] = text("#timeline-list")
    shots("12-denied")

    send("delete other.txt")
    _wait(driver, run_with("waiting"), "the run waits")
    click("#cancel-run")
    _wait(driver, run_with("cancelled"), "the run is cancelled")
    seen["cancel_outcome"] = text("#run-head")
    shots("13-cancelled")

    driver.get(f"{base}/console/#/threads/{thread_id}")
    _wait(driver, lambda d: d.find_elements(By.ID, "regenerate"), "the thread view")
    runs_before = len(driver.find_elements(By.CSS_SELECTOR, "a.run-link"))
    seen["runs_before"] = runs_before
    click("#regenerate")
    # The cancelled answer to "delete other.txt" is answered again: a new approval.
    _wait(driver, run_with("waiting"), "the regenerated run waits for approval")
    seen["regenerated_pending"] = len(
        driver.find_elements(By.CSS_SELECTOR, "li.pending[data-kind='approval']")
    )
    shots("14-regenerated")
    return seen


async def test_console_actions_in_a_browser(
    console_server: InProcessServer, driver: Any, tmp_path: Path
) -> None:
    srv = console_server
    created = await srv.threads.CreateThread(
        thread_service_pb2.CreateThreadRequest(), metadata=AUTH
    )
    thread_id = created.thread.id
    base = f"http://127.0.0.1:{srv.app.http_port}"
    shots = Shots(driver, tmp_path)
    try:
        seen = await asyncio.to_thread(act, driver, base, thread_id, shots)
    except Exception:
        shots("failure-actions")
        raise

    assert "denied: d1" in seen["denied_timeline"]
    assert "Status\ncancelled" in seen["cancel_outcome"]
    assert seen["runs_before"] == 3
    assert seen["regenerated_pending"] == 1
    runs = await srv.runs.ListRuns(
        run_service_pb2.ListRunsRequest(thread_id=thread_id), metadata=AUTH
    )
    assert len(runs.runs) == 4
    # The deny reason reached the run as the API carries it (the tool part's approval).
    listed = await srv.threads.ListMessages(
        thread_service_pb2.ListMessagesRequest(thread_id=thread_id), metadata=AUTH
    )
    approvals = [
        part.tool.approval
        for m in listed.messages
        for part in m.parts
        if part.WhichOneof("part") == "tool" and part.tool.tool_name == "delete_file"
    ]
    assert any(a.reason == "not today" and not a.approved for a in approvals)
