"""The dashboard in a real headless browser (Debian's Chromium, driven by Selenium through its
chromedriver), against a runtime job on the emulator: the jobs page lists it running; after two
preemptions its page shows the attempts on the timeline, the preemptions marked, and a loss
curve with points from the attempts that ended;
cancel is refused without the token and works through the page; the jobs page follows a
state change without a reload. Screenshots go to the test's tmp dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import urlsplit

import pytest
from reconcile_helpers import DEMO_OPTIMIZER, ZONE, node_ref

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # about 2 min here

SPEC = f"""\
name: uib
tpu: {{accelerator: v4-8, zone: {ZONE}, queued: false}}
run_dir: gs://BUCKET/runs
requeue: {{backoff_seconds: 0, max_preemptions: 3, max_failures: 0}}
run:
  runtime:
    model: tiny
    steps: 1000000   # runs until the test cancels it
    batch_size: 8
    seq_len: 64
    checkpoint_every: 100000   # only the SIGTERM save: saves on gcsfuse are slow
    log_every: 2
    heartbeat_every_s: 1
    sigterm_grace_s: 110   # the runtime's share of the 120 s notice below (its default, 25 s, is Spot's)
    optimizer: {DEMO_OPTIMIZER}
"""


@pytest.fixture
def chromium(tmp_path, monkeypatch):
    """A headless Chromium, offline: no Selenium Manager download, no Google background traffic."""
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not browser or not driver_path:
        pytest.skip("Chromium and chromedriver are not installed (scripts/setup --test installs "
                    "Debian's chromium and chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,2200", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def dashboard():
    proc = subprocess.Popen([sys.executable, "-m", "tpujob.cli.main", "ui", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout.readline().startswith("tpujob ui: serving"), proc.stderr.read()
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


def _show(cli) -> dict:
    result = cli("show", "--json", "uib")
    assert result.code == 0, result.err
    return json.loads(result.out)


def _requeue_until(cli, done, timeout: float, what: str) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        assert cli("requeue").code == 0
        data = _show(cli)
        if done(data):
            return data
        assert time.monotonic() < deadline, f"{what}: " + json.dumps(data, indent=1)[-3000:]
        time.sleep(1.0)


def _wait(driver, condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        found = condition(driver)
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}; page: {driver.page_source[-2000:]}"
        time.sleep(0.3)


def test_the_dashboard_shows_a_preempted_job_and_cancels_it(cli, local_cloud, shared_emulator, project,
                                                             tmp_path, chromium, dashboard):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from selenium.webdriver.common.by import By

    from tpujob.attempt.buckets import create_local_bucket

    bucket_name = f"uib-{uuid.uuid4().hex[:8]}"
    client = storage.Client(project=project, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": shared_emulator["storage_endpoint"]})
    create_local_bucket(client, bucket_name)
    spec = tmp_path / "uib.yaml"
    spec.write_text(SPEC.replace("BUCKET", bucket_name))
    assert cli("create", spec).code == 0
    job_ref = _show(cli)["id"]  # "000001": the run dir's name
    job_id = int(job_ref)

    def logged_after(since: float) -> bool:
        blob = client.bucket(bucket_name).get_blob(f"runs/{job_ref}/metrics.jsonl")
        lines = blob.download_as_bytes().decode().splitlines() if blob is not None else []
        return any(json.loads(line)["time"] > since for line in lines if line.strip())

    # Two attempts that trained and were preempted: gcsfuse uploads a file at close, so an
    # attempt's metrics reach the bucket when its program ends. Standard's 120 s notice: the
    # hosts are off once the save is done, and a save beside the heaviest tests may take 30 s.
    for number in (1, 2):
        data = _requeue_until(cli, lambda d, number=number: d["attempt"] == number and d["state"] == "RUNNING"
                              and (d["attempts"][-1]["last_step"] or 0)
                              >= (d["attempts"][-1]["resumed_from_step"] or 0) + 6, 180, f"attempt {number} trains")
        local_cloud.preempt(node_ref(project, ZONE, data["attempts"][-1]["slice_name"]), grace_seconds=120)
    _requeue_until(cli, lambda d: d["attempt"] == 3 and d["state"] == "RUNNING", 180, "attempt 3 runs")
    from tpujob.service.context import Context

    second = Context.load().store.attempts(job_id)[1]
    assert logged_after(second.started_at), "attempt 2's metrics never reached the bucket"

    # The jobs page, through the printed URL: the job is listed running.
    driver = chromium
    base = "{0.scheme}://{0.netloc}".format(urlsplit(dashboard))
    driver.get(dashboard)
    row = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr.job[data-id="{job_id}"]'), "job listed")[0]
    assert row.get_attribute("data-state") == "RUNNING"
    assert "uib" in row.text and "v4-8" in row.text
    assert "token" not in driver.current_url  # the redirect took it out of the address bar
    # The pages live under the path the cookie is scoped to (docs/ui.md).
    base += urlsplit(driver.current_url).path.rstrip("/")
    driver.save_screenshot(str(tmp_path / "jobs.png"))

    # Its page: two attempts, the preemption marked, a loss curve with points from both.
    row.find_element(By.LINK_TEXT, job_ref).click()
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.timeline"), "timeline drawn")
    bars = driver.find_elements(By.CSS_SELECTOR, "svg.timeline g.bar")
    assert [b.get_attribute("data-attempt") for b in bars] == ["1", "2", "3"]
    marks = driver.find_elements(By.CSS_SELECTOR, 'svg.timeline path.mark[data-kind="preempted"]')
    assert [m.get_attribute("data-attempt") for m in marks] == ["1", "2"]
    running = driver.find_elements(By.CSS_SELECTOR, 'svg.timeline g.bar[data-attempt="3"] rect[data-state="RUNNING"]')
    assert running, "attempt 3's bar shows it running"
    series = driver.find_elements(By.CSS_SELECTOR, 'svg.curve[data-metric="loss"] polyline.series')
    points = {s.get_attribute("data-attempt"): int(s.get_attribute("data-points")) for s in series}
    assert {"1", "2"} <= set(points) and min(points.values()) >= 1, points
    assert driver.find_elements(By.CSS_SELECTOR, 'svg.curve[data-metric="loss"] line.resume[data-attempt="2"]')
    # Host 0's log is read again every 15 s: attempt 3's program may not have printed a step when
    # the page opened (a loaded machine spends a while importing JAX), but its steps show up live.
    _wait(driver, lambda d: "step" in d.find_element(By.ID, "log").text, "host 0's log shows steps",
          timeout=120)
    driver.save_screenshot(str(tmp_path / "job.png"))

    # Without the token: the confirm page and the action are refused, and nothing moves.
    driver.delete_all_cookies()
    driver.get(f"{base}/jobs/{job_id}/cancel")
    assert "a token is needed" in driver.find_element(By.TAG_NAME, "body").text
    request = urllib.request.Request(f"{base}/jobs/{job_id}/cancel", data=b"csrf=x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    assert _show(cli)["state"] == "RUNNING"

    # With it: cancel through the page, confirmed.
    driver.get(dashboard)
    driver.get(f"{base}/jobs/{job_id}")
    driver.find_element(By.CSS_SELECTOR, "a.button.cancel").click()
    _wait(driver, lambda d: d.find_elements(By.ID, "confirm"), "confirm page").pop().click()
    _wait(driver, lambda d: "cancel: done." in d.page_source, "cancelled", timeout=90)
    assert _show(cli)["state"] == "CANCELLED"
    driver.save_screenshot(str(tmp_path / "cancelled.png"))

    # The jobs page follows the store without a reload.
    driver.get(f"{base}/")
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f'tr.job[data-id="{job_id}"][data-state="CANCELLED"]'),
          "listed cancelled")
    driver.execute_script("window.notReloaded = true")
    assert cli("resume", "uib").code == 0  # RECOVERING, and on (a resume sweeps it at once)
    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR,
                                            f'tr.job[data-id="{job_id}"]:not([data-state="CANCELLED"])'),
          "the row refreshed", timeout=20)
    assert driver.execute_script("return window.notReloaded") is True
    assert cli("delete", "uib").code == 0
