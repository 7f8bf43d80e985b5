// jsonl-sessions viewer: loads the next page of the session list as it scrolls, older and
// newer messages of a transcript as it scrolls, and new messages of the newest page (the
// live tail, polled every second). Every piece of HTML it inserts was rendered and escaped
// by the server; this script builds no markup from data itself.
"use strict";

const POLL_MS = 1000;

async function getJSON(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(response.status + " " + response.statusText);
  return response.json();
}

function fragment(html) {
  const template = document.createElement("template");
  template.innerHTML = html;
  return template.content;
}

// Whenever `element` comes into view, run `load` (one at a time) until it returns false.
function whenVisible(element, load) {
  let busy = false;
  const observer = new IntersectionObserver(async (entries) => {
    if (busy || !entries.some((e) => e.isIntersecting)) return;
    busy = true;
    let more = true;
    try {
      more = await load();
    } finally {
      busy = false;
    }
    if (!more) { observer.disconnect(); return; }
    // Observe afresh: an observer reports changes only, and the element may have left and
    // come back into view before the browser looked (a short page, or a quick scroll).
    if (element.isConnected) {
      observer.unobserve(element);
      observer.observe(element);
    }
  }, { rootMargin: "400px 0px" });
  observer.observe(element);
}

// A tool result whose call is on the page goes inside that call's box.
function pairResults(root) {
  for (const result of root.querySelectorAll("li.msg[data-result-for]")) {
    const call = document.getElementById("call-" + result.dataset.resultFor);
    if (!call || call.contains(result)) continue;
    const slot = call.querySelector(".tool-result");
    if (!slot || slot.children.length) continue;
    const box = document.createElement("div");
    box.className = result.className.replace(/\bmsg\b/, "msg result");
    box.id = result.id;
    box.dataset.id = result.dataset.id;
    while (result.firstChild) box.appendChild(result.firstChild);
    slot.appendChild(box);
    const status = call.querySelector("summary .status");
    if (status) status.textContent = "result";
    result.remove();
  }
}

function setupList() {
  const body = document.getElementById("sessions");
  const more = document.getElementById("more");
  if (!body || !more || !body.dataset.nextPart) return;
  whenVisible(more, async () => {
    const part = await getJSON(body.dataset.nextPart);
    body.appendChild(fragment(part.html));
    body.dataset.nextPart = part.next || "";
    if (!part.next) { more.remove(); return false; }
    more.querySelector("a").href = part.next_page;
    return true;
  });
}

function setupSession() {
  const list = document.getElementById("messages");
  if (!list) return;
  pairResults(document);
  const status = document.getElementById("live");

  if (list.dataset.target) {
    const target = document.getElementById("m-" + list.dataset.target);
    if (target) { target.classList.add("target"); target.scrollIntoView({ block: "center" }); }
  } else if (!location.hash) {
    window.scrollTo(0, document.documentElement.scrollHeight);
  }

  const older = document.getElementById("older");
  if (older && list.dataset.older) {
    whenVisible(older, async () => {
      const part = await getJSON(list.dataset.older);
      const before = document.documentElement.scrollHeight;
      list.insertBefore(fragment(part.html), list.firstChild);
      pairResults(document);
      window.scrollBy(0, document.documentElement.scrollHeight - before);  // keep what was in view in place
      list.dataset.older = part.older || "";
      if (!part.older) { older.remove(); return false; }
      older.querySelector("a").href = part.older_page;
      return true;
    });
  }

  async function newer() {
    const nearBottom = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
    const part = await getJSON(list.dataset.newer);
    if (part.count) {
      list.appendChild(fragment(part.html));
      pairResults(document);
      if (list.dataset.live === "on" && nearBottom) window.scrollTo(0, document.documentElement.scrollHeight);
    }
    list.dataset.newer = part.newer;
    return part.more;
  }

  // A window that does not reach the newest message (an older page, a search hit) loads
  // newer pages only once the reader scrolls: opened from a link, it stays what the link showed.
  const newerLink = document.getElementById("newer");
  if (list.dataset.live !== "on" && newerLink) {
    const arm = () => {
      for (const name of ["wheel", "keydown", "touchmove"]) window.removeEventListener(name, arm);
      whenVisible(newerLink, async () => {
        if (await newer()) return true;
        newerLink.remove();
        list.dataset.live = "on";
        tail();
        return false;
      });
    };
    for (const name of ["wheel", "keydown", "touchmove"]) window.addEventListener(name, arm, { passive: true });
  }

  async function tail() {
    for (;;) {
      try {
        while (await newer()) { /* more waiting: fetch again at once */ }
        if (status) status.classList.remove("error");
      } catch (error) {
        if (status) { status.textContent = "Live updates stopped: " + error.message; status.classList.add("error"); }
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    }
  }
  if (list.dataset.live === "on") tail();
}

document.addEventListener("DOMContentLoaded", () => { setupList(); setupSession(); });
