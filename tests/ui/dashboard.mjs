// Opens kvserve's dashboard in headless Chromium (Debian's, never a
// downloaded one) and reports what it shows, as one JSON line on stdout,
// for ui_test.go to check against the server. Environment:
//   UI_URL        the server's base URL
//   UI_ADMIN_KEY  an admin key; UI_DEV_KEY a key without the admin role
//   UI_CHROMIUM   the browser binary; UI_PROFILE a fresh profile directory
//   UI_SCREENSHOTS  paths to save the screenshot to, separated by ':'
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(name + " is not set");
  return v;
};
const url = env("UI_URL");
const TIMEOUT = 30_000;

// Prometheus's text format: the sum of a metric's series.
async function scrape(key) {
  const resp = await fetch(url + "/metrics", { headers: { Authorization: "Bearer " + key } });
  if (!resp.ok) throw new Error("/metrics: " + resp.status);
  const text = await resp.text();
  const sum = (name) => text.split("\n")
    .filter((l) => l.startsWith(name + " ") || l.startsWith(name + "{"))
    .reduce((acc, l) => acc + Number(l.slice(l.lastIndexOf(" ") + 1)), 0);
  return {
    requests: sum("kvserve_http_requests_total"),
    prompt: sum("kvserve_prefix_cache_queries_total"),
    cached: sum("kvserve_prefix_cache_hits_total"),
    generated: sum("kvserve_generation_tokens_total"),
  };
}

// Every data-metric element's raw value, the histograms' bars and the
// tables' rows.
function readPage() {
  const m = {};
  for (const el of document.querySelectorAll("[data-metric]")) {
    if (el.dataset.value !== undefined && el.dataset.value !== "") m[el.dataset.metric] = Number(el.dataset.value);
  }
  const bars = (id) => [...document.querySelectorAll("#" + id + " rect[data-count]")].map((r) => Number(r.dataset.count));
  const rows = (id) => [...document.querySelectorAll("#" + id + " tbody tr")].map((tr) => [...tr.cells].map((c) => c.textContent));
  return {
    metrics: m, snapshot: document.body.dataset.snapshot, fragment: location.hash,
    ttftBars: bars("chart-ttft"), itlBars: bars("chart-itl"),
    historyPaths: document.querySelectorAll("#chart-history path").length,
    sessions: rows("sessions"), caches: rows("caches"),
    costsMessage: document.querySelector('[data-metric="costs-message"]').textContent,
    costs: rows("costs"),
  };
}

// read waits for a poll that started after now, then reads the page,
// bracketed by two scrapes of /metrics: every counter shown lies between
// them.
async function read(page, key) {
  const before = await scrape(key);
  const t = Date.now();
  await page.waitForFunction((t) => Date.parse(document.body.dataset.snapshot || "0") > t, t, { timeout: TIMEOUT });
  const shown = await page.evaluate(readPage);
  const after = await scrape(key);
  return { before, shown, after };
}

const browser = await chromium.launchPersistentContext(env("UI_PROFILE"), {
  executablePath: env("UI_CHROMIUM"),
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const out = {};
try {
  const admin = env("UI_ADMIN_KEY");
  const page = browser.pages()[0] || await browser.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(url + "/ui#key=" + encodeURIComponent(admin));
  // Live numbers: requests counted and a histogram with bars.
  await page.waitForFunction(() => {
    const r = document.querySelector('[data-metric="requests"]');
    return r && Number(r.dataset.value) > 0 && document.querySelectorAll("#chart-ttft rect[data-count]").length > 0;
  }, null, { timeout: TIMEOUT });
  out.first = await read(page, admin);
  await page.waitForTimeout(1500);
  out.second = await read(page, admin);
  // The last-minute chart has points by now.
  await page.waitForFunction(() => document.querySelectorAll("#chart-history path").length > 0, null, { timeout: TIMEOUT });
  out.third = await read(page, admin);
  for (const path of (process.env.UI_SCREENSHOTS || "").split(":").filter(Boolean)) {
    await page.screenshot({ path, fullPage: true });
  }
  out.errors = errors;

  // A key without the admin role, in a fresh tab's storage.
  const refused = await browser.newPage();
  const answer = refused.waitForResponse((r) => r.url().endsWith("/v1/admin/dashboard"), { timeout: TIMEOUT });
  await refused.goto(url + "/ui#key=" + encodeURIComponent(env("UI_DEV_KEY")));
  const resp = await answer;
  await refused.waitForSelector("#refused:not([hidden])", { timeout: TIMEOUT });
  out.refused = await refused.evaluate(() => ({
    status: document.getElementById("refused-status").dataset.status,
    text: document.getElementById("refused").innerText,
    boardHidden: document.getElementById("board").hidden,
  }));
  out.refused.http = resp.status();
  out.refused.body = await resp.text();

  // No key at all: the login form, then the board once an admin key is
  // typed in.
  const login = await browser.newPage();
  await login.goto(url + "/ui");
  await login.waitForSelector("#login:not([hidden])", { timeout: TIMEOUT });
  await login.fill("#key", admin);
  await login.click("#login button[type=submit]");
  await login.waitForFunction(() => !document.getElementById("board").hidden &&
    Number(document.querySelector('[data-metric="requests"]').dataset.value) > 0, null, { timeout: TIMEOUT });
  out.login = await login.evaluate(() => ({ loginHidden: document.getElementById("login").hidden, address: location.href }));
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
