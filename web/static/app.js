// sharecrawl search page: results follow the typing (debounced) from /api/search, facets and
// pages load in place, "Copy path" puts the Windows path on the clipboard, and a copy that
// cannot be played or downloaded says why beside it (the server's sentence). Elements are
// built with textContent only (never innerHTML), mirroring templates/blocks.html, so names
// from the shares are always text. Without this script the page works by plain links.
"use strict";

(function () {
  const DEBOUNCE_MS = 250;
  const form = document.getElementById("search");
  if (!form) return;
  const input = document.getElementById("q");
  const offline = document.getElementById("offline");
  const size = document.getElementById("size");
  const facets = document.getElementById("facets");
  const results = document.getElementById("results");
  const status = document.getElementById("status");
  const copied = document.getElementById("copied");
  let timer = null;
  let controller = null;
  let page = Number(new URLSearchParams(location.search).get("page") || 1);

  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child === null || child === undefined || child === "") continue;
      node.append(typeof child === "string" || typeof child === "number"
        ? document.createTextNode(String(child)) : child);
    }
    return node;
  }

  function link(className, href, text) {
    const a = el("a", className, text);
    a.setAttribute("href", href);
    return a;
  }

  function copyItem(c, w) {
    const li = el("li", "copy" + (c.online ? "" : " offline") + (c.best ? " best" : ""));
    li.append(el("span", "file", c.link ? link("name", c.link, c.name) : el("b", "name", c.name)));
    li.append(el("span", "quality", el("span", "host", c.host_name),
                 " · " + c.quality + " · " + c.size + (c.online ? "" : " · offline")));
    if (c.link) {
      const actions = el("span", "actions");
      if (c.play) {
        const play = el("button", "play", "▶ Play");
        play.type = "button";
        play.dataset.src = c.link;
        play.dataset.play = c.play;
        play.setAttribute("aria-label", "Play " + w.title);
        actions.append(play, " ");
      }
      const download = link("download", c.link + "?download=1", "Download");
      download.setAttribute("download", c.name);
      download.setAttribute("aria-label", "Download " + w.title);
      actions.append(download);
      li.append(actions);
    }
    if (c.why) li.append(el("span", "why", c.why));
    const button = el("button", "copy-path", "Copy path");
    button.type = "button";
    button.dataset.path = c.unc;
    button.setAttribute("aria-label", "Copy the Windows path of " + w.title);
    li.append(el("span", "open", el("code", "unc", c.unc), " ", button));
    return li;
  }

  function cover(src) {
    const img = el("img", "cover");
    img.src = src;
    img.alt = "";
    img.width = img.height = 60;
    img.loading = "lazy";
    return img;
  }

  function copyList(list, w) {
    const ul = el("ul", "copies");
    for (const c of list) ul.append(copyItem(c, w));
    return ul;
  }

  function work(w) {
    const article = el("article", "work" + (w.offline ? " offline" : "") +
                       (w.cover ? " has-cover" : ""));
    article.dataset.work = w.work_id;
    article.dataset.album = w.album;
    if (w.cover) article.append(cover(w.cover));
    article.append(el("h3", null, el("span", "kind", w.kind), " ", el("span", "title", w.title)));
    if (w.subtitle) article.append(el("p", "subtitle", w.subtitle));
    article.append(el("p", "summary", w.summary));
    article.append(copyList(w.copies, w));
    if (w.folded.length) {
      const n = w.folded.length;
      article.append(el("details", "more",
        el("summary", null, n + " more " + (n === 1 ? "copy" : "copies")), copyList(w.folded, w)));
    }
    if (w.more) article.append(el("p", "summary", "and " + w.more + " more not listed"));
    return article;
  }

  function block(b) {
    if (b.type === "work") return work(b.work);
    if (b.type === "series") {
      const section = el("section", "series", el("h3", "series-title", b.title));
      for (const season of b.seasons) {
        const div = el("div", "season", el("h4", null, season.label));
        for (const ep of season.episodes) div.append(work(ep));
        section.append(div);
      }
      return section;
    }
    const tracks = b.tracks + " new " + (b.tracks === 1 ? "track" : "tracks");
    return el("article", "album" + (b.cover ? " has-cover" : ""), b.cover ? cover(b.cover) : null,
      el("h3", null, link(null, b.href, b.title)),
      el("p", "subtitle", b.artist + (b.year ? " · " + b.year : "") + " · " + tracks));
  }

  function renderResults(view) {
    const nodes = [];
    if (view.error) { const p = el("p", "error", view.error); p.id = "error"; nodes.push(p); }
    if (view.notice) { const p = el("p", "notice", view.notice); p.id = "notice"; nodes.push(p); }
    if (view.suggestion) {
      const near = link(null, view.suggestion.href, view.suggestion.q);
      const p = el("p", "notice", "Did you mean: ", near);
      p.id = "suggestion";
      nodes.push(p);
    }
    for (const section of view.sections) {
      const s = el("section", "section");
      if (section.title) s.append(el("h2", null, section.title));
      for (const b of section.blocks) s.append(block(b));
      nodes.push(s);
    }
    if (view.pager) {
      const nav = el("nav", "pager");
      nav.id = "pager";
      nav.setAttribute("aria-label", "Pages");
      if (view.pager.prev) nav.append(link("prev", view.pager.prev, "← Previous"));
      nav.append(el("span", "range", view.pager.text));
      if (view.pager.next) nav.append(link("next", view.pager.next, "Next →"));
      nodes.push(nav);
    }
    results.replaceChildren(...nodes);
  }

  function renderFacets(list) {
    const nodes = [];
    for (const f of list) {
      const section = el("section", "facet", el("h2", null, f.label));
      section.dataset.facet = f.name;
      const ul = el("ul");
      for (const v of f.values) {
        ul.append(el("li", null, link("facet-value" + (v.active ? " active" : ""), v.href, v.label),
                     " ", el("span", "count", v.count)));
      }
      section.append(ul);
      nodes.push(section);
    }
    facets.replaceChildren(...nodes);
  }

  function params(q, pageNumber) {
    const p = new URLSearchParams();
    p.set("q", q);
    if (pageNumber > 1) p.set("page", String(pageNumber));
    if (size) p.set("size", size.value);
    if (offline.checked) p.set("offline", "1");
    return p;
  }

  async function load(q, pageNumber, how) {
    page = pageNumber;
    const p = params(q, pageNumber);
    if (controller) controller.abort(); // an answer to an older query must not win
    controller = new AbortController();
    let data;
    try {
      const response = await fetch("/api/search?" + p, { signal: controller.signal });
      data = await response.json();
      if (!data.view) data = { view: { sections: [], facets: [], pager: null,
                                       error: data.error, notice: null } };
    } catch (e) {
      if (e.name === "AbortError") return;
      data = { view: { sections: [], facets: [], pager: null, notice: null,
                       error: "The server did not answer: is `sharecrawl serve` running?" } };
    }
    renderResults(data.view);
    renderFacets(data.view.facets);
    if (data.status) status.textContent = data.status;
    document.title = (q ? q + " · " : "") + "sharecrawl";
    const url = q || pageNumber > 1 || offline.checked ? "/?" + p : "/";
    if (how === "push") {
      history.pushState(null, "", url);
      window.scrollTo(0, 0); // a new page or facet starts at the top, as a link would
    }
    else if (how === "replace") history.replaceState(null, "", url);
    document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => load(input.value.trim(), 1, "replace"), DEBOUNCE_MS);
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(timer);
    load(input.value.trim(), 1, "push");
  });
  offline.addEventListener("change", () => load(input.value.trim(), page, "replace"));

  // Facet values, pages and new albums are links to the page itself: load them in place.
  document.addEventListener("click", (event) => {
    const a = event.target.closest("a");
    if (a && (a.closest("#facets") || a.closest("#pager") || a.closest(".album"))) {
      const target = new URL(a.href, location.href);
      if (target.origin !== location.origin || target.pathname !== "/") return;
      event.preventDefault();
      const q = target.searchParams.get("q") || "";
      input.value = q;
      offline.checked = target.searchParams.get("offline") === "1";
      load(q, Number(target.searchParams.get("page") || 1), "push");
      return;
    }
    const button = event.target.closest("button.copy-path");
    if (button) copyPath(button.dataset.path);
    const play = event.target.closest("button.play");
    if (play) start(play);
    const download = event.target.closest("a.download");
    if (download && !download.dataset.checked) {
      event.preventDefault(); // the browser would save a refusal as a failed download
      checkedDownload(download);
    }
  });

  // Why a copy's stream is refused, in words: the server's one sentence (web/stream.py),
  // read by asking for the copy's first byte; null when the server sends it.
  async function refusal(src) {
    let response;
    try {
      response = await fetch(src, { headers: { Range: "bytes=0-0" }, cache: "no-store" });
    } catch (e) {
      return "The server did not answer: is `sharecrawl serve` running?";
    }
    if (response.ok) {
      response.body && response.body.cancel();
      return null;
    }
    const text = (response.headers.get("content-type") || "").startsWith("text/plain")
      ? (await response.text()).trim() : "";
    return text || "The server answered HTTP " + response.status + ".";
  }

  // The reason beside the copy (after its buttons), or none for "".
  function say(li, text) {
    let why = li.querySelector(".why");
    if (!why && text) {
      why = el("span", "why");
      why.setAttribute("role", "status");
      const actions = li.querySelector(".actions");
      if (actions) actions.after(why); else li.append(why);
    }
    if (why) {
      why.textContent = text;
      why.hidden = !text;
    }
  }

  async function checkedDownload(a) {
    const li = a.closest(".copy");
    const why = await refusal(a.getAttribute("href"));
    say(li, why ? "Cannot download: " + why : "");
    if (why) return;
    a.dataset.checked = "1"; // this click goes through to the browser's own download
    a.click();
    delete a.dataset.checked;
  }

  // A cover that fails to load shows the placeholder, never a broken image.
  function placeholder(img) {
    if (!img.src.endsWith("/static/cover.svg")) img.src = "/static/cover.svg";
  }
  document.addEventListener("error", (event) => {
    if (event.target.matches && event.target.matches("img.cover")) placeholder(event.target);
  }, true);
  for (const img of document.querySelectorAll("img.cover")) {
    if (img.complete && img.naturalWidth === 0) placeholder(img); // failed before this ran
  }

  // Players: a copy's <audio> or <video> replaces its Play button; starting one pauses the
  // others, and a track that ends starts the next work of its album on the page.
  function start(button) {
    const media = el(button.dataset.play, "player");
    media.controls = true;
    media.preload = "auto";
    media.src = button.dataset.src;
    media.setAttribute("aria-label", button.getAttribute("aria-label"));
    const article = button.closest(".work");
    const li = button.closest(".copy");
    media.addEventListener("ended", () => next(article));
    media.addEventListener("error", () => failed(media, button, li));
    say(li, "");
    button.replaceWith(media);
    media.play().catch(() => { /* the browser wants a click on the player itself */ });
  }

  // A player whose stream failed gives way to its Play button again, with the reason.
  async function failed(media, button, li) {
    const why = await refusal(button.dataset.src);
    media.replaceWith(button);
    say(li, "Cannot play: " +
        (why || "this browser cannot play the file, or its stream broke off; try Download."));
  }

  function next(article) {
    if (!article || !article.dataset.album) return;
    const works = Array.from(document.querySelectorAll("#results .work"));
    const later = works.slice(works.indexOf(article) + 1)
      .find((w) => w.dataset.album === article.dataset.album &&
                   w.querySelector(".player, button.play"));
    if (!later) return;
    const player = later.querySelector(".player");
    if (player) player.play().catch(() => {});
    else start(later.querySelector("button.play"));
  }

  document.addEventListener("play", (event) => {
    for (const media of document.querySelectorAll(".player")) {
      if (media !== event.target) media.pause();
    }
  }, true);

  // On a narrow screen the facets fold behind the Filters button (app.css).
  const toggle = document.getElementById("facets-toggle");
  document.body.classList.add("js");
  toggle.hidden = false;
  toggle.addEventListener("click", () => {
    const open = facets.classList.toggle("open");
    toggle.setAttribute("aria-expanded", String(open));
  });

  window.addEventListener("popstate", () => {
    const p = new URLSearchParams(location.search);
    input.value = p.get("q") || "";
    offline.checked = p.get("offline") === "1";
    load(input.value, Number(p.get("page") || 1), null);
  });

  function tell(text) {
    copied.textContent = text;
    copied.hidden = false;
    clearTimeout(tell.timer);
    tell.timer = setTimeout(() => { copied.hidden = true; }, 4000);
  }

  // navigator.clipboard needs a secure context (http://127.0.0.1 is one, a LAN address is
  // not): fall back to a selected textarea and execCommand, then to asking for Ctrl+C.
  async function copyPath(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        tell("Copied " + text);
        return;
      } catch (e) { /* denied: try the old way */ }
    }
    const area = el("textarea", "offscreen", text);
    area.setAttribute("readonly", "");
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    tell(ok ? "Copied " + text : "Press Ctrl+C to copy: " + text);
  }
})();
