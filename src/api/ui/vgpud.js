// SPDX-License-Identifier: GPL-2.0-or-later
//
// vgpud's web VF map (GET /ui/). It reads /gpus (API-6), /gpu/health (API-10), /resources
// (API-4, API-5) and /instances (API-7) with the operator's bearer token (API-12) and draws one
// cell per VF, every five seconds.
//
// Rules this file keeps:
//  - the token lives in sessionStorage only: never localStorage, a cookie or the URL, so it goes
//    with the tab; without one the page makes no data request at all;
//  - everything the host says (model names, quarantine and drain reasons, instance names) is
//    outside input: it is put into the page with textContent or as an attribute value, never as
//    markup, and only known state names become class names;
//  - a 401 forgets the token and asks for a new one;
//  - the console (CONS-5) is xterm.js, served by vgpud itself, on the console's WebSocket
//    (CONS-3): the token goes as the subprotocol "bearer.<JWT>" (a browser cannot set the
//    Authorization header of a WebSocket) and vgpud answers with "vgpud.console.v1" only; what
//    is typed goes out as binary frames, and the guest's bytes are written to the terminal as
//    they come, never into the page's markup.
"use strict";

(function () {
        const TOKEN_KEY = "vgpud.token";
        const REFRESH_MS = 5000;
        const STATES = ["free", "reserved", "claimed", "dirty", "quarantined", "unreadable"];

        const $ = (id) => document.getElementById(id);
        let timer = null;
        // Bumped on every sign-in and sign-out: an answer for an older session is dropped.
        let session = 0;
        let refreshes = 0;

        class Unauthorized extends Error {}

        function el(tag, className, text) {
                const e = document.createElement(tag);
                if (className)
                        e.className = className;
                if (text !== undefined && text !== null)
                        e.textContent = String(text);
                return e;
        }

        function readToken() {
                try {
                        return sessionStorage.getItem(TOKEN_KEY);
                } catch (e) {
                        return null;
                }
        }

        function forgetToken() {
                try {
                        sessionStorage.removeItem(TOKEN_KEY);
                } catch (e) {
                        /* storage disabled: nothing was kept */
                }
        }

        async function getJson(path, token) {
                const r = await fetch(path, {
                        headers: {
                                "Authorization": "Bearer " + token,
                                "Accept": "application/json",
                        },
                        cache: "no-store",
                        credentials: "omit",
                        redirect: "error",
                        referrerPolicy: "no-referrer",
                });
                if (r.status === 401)
                        throw new Unauthorized(path);
                if (!r.ok) {
                        let why = String(r.status);
                        try {
                                const b = await r.json();
                                why += " " + b.code + ": " + b.message;
                        } catch (e) {
                                /* not an API-11 body */
                        }
                        throw new Error(path + ": " + why);
                }
                return r.json();
        }

        // ---- sign-in ----------------------------------------------------------------------

        function stopRefreshing() {
                if (timer !== null)
                        clearTimeout(timer);
                timer = null;
        }

        function showSignin(message) {
                session++;
                stopRefreshing();
                $("console").hidden = true;
                $("gpus").replaceChildren();
                for (const id of ["signout", "refresh", "updated"])
                        $(id).hidden = true;
                const m = $("signin-message");
                m.textContent = message || "";
                m.hidden = !message;
                $("signin").hidden = false;
                $("token").focus();
        }

        function showConsole() {
                $("signin").hidden = true;
                $("signin-message").hidden = true;
                $("console").hidden = false;
                $("signout").hidden = false;
                $("refresh").hidden = false;
        }

        function signIn(event) {
                event.preventDefault();
                const field = $("token");
                // A pasted "Bearer …" header value works too.
                const token = field.value.trim().replace(/^bearer\s+/i, "");
                field.value = "";
                if (!token || /\s/.test(token)) {
                        showSignin("That is not a token: paste the JWT alone, without spaces.");
                        return;
                }
                try {
                        sessionStorage.setItem(TOKEN_KEY, token);
                } catch (e) {
                        showSignin("This browser refuses session storage, where the token " +
                                   "is kept.");
                        return;
                }
                start();
        }

        function signOut() {
                closeConsole();
                forgetToken();
                showSignin("Signed out.");
        }

        function start() {
                session++;
                stopRefreshing();
                showConsole();
                refresh(session);
        }

        // ---- refresh ----------------------------------------------------------------------

        async function refresh(mine) {
                const token = readToken();
                if (!token) {
                        showSignin();
                        return;
                }
                stopRefreshing();
                try {
                        const [gpus, health, resources, instances] = await Promise.all([
                                getJson("/gpus", token),
                                getJson("/gpu/health", token),
                                getJson("/resources", token),
                                getJson("/instances", token),
                        ]);
                        if (mine !== session)
                                return;
                        render(gpus, health, resources, instances);
                        $("error-banner").hidden = true;
                        const now = new Date();
                        const u = $("updated");
                        u.textContent = "updated " + now.toLocaleTimeString([], { hour12: false });
                        u.dataset.time = now.toISOString();
                        u.dataset.refreshes = String(++refreshes);
                        u.hidden = false;
                } catch (e) {
                        if (mine !== session)
                                return;
                        if (e instanceof Unauthorized) {
                                forgetToken();
                                showSignin("vgpud refused the token (401 unauthorized): it " +
                                           "may have expired or be signed with another " +
                                           "secret. Sign in again.");
                                return;
                        }
                        const b = $("error-banner");
                        b.textContent = "Could not refresh: " + (e && e.message ? e.message : e) +
                                        ". Showing the last answer; retrying.";
                        b.hidden = false;
                }
                if (mine === session)
                        timer = setTimeout(() => refresh(mine), REFRESH_MS);
        }

        // ---- rendering --------------------------------------------------------------------

        function shortProfile(name) {
                return String(name).replace(/^NVIDIA\s+/, "");
        }

        function renderBanners(g) {
                const banner = $("placement-banner");
                const reason = g && g.placement_disabled_reason;
                banner.replaceChildren();
                if (reason) {
                        banner.append(el("strong", null, "Placement disabled"),
                                      el("span", "banner-text", reason));
                }
                banner.hidden = !reason;

                const warn = $("warning-banner");
                const warning = g && g.placement_warning;
                warn.replaceChildren();
                if (warning)
                        warn.append(el("strong", null, "Placement warning"),
                                    el("span", "banner-text", warning));
                warn.hidden = !warning;
        }

        function renderCapacity(g) {
                for (const k of ["total", "used", "allocatable", "quarantined"])
                        $("slots-" + k).textContent = g ? String(g[k + "_slots"]) : "–";
                const body = $("profiles").tBodies[0];
                body.replaceChildren();
                if (!g) {
                        const tr = el("tr");
                        const td = el("td", "detail", "No vGPU framework on this host.");
                        td.colSpan = 3;
                        tr.append(td);
                        body.append(tr);
                        return;
                }
                // By size, then name: "2Q" before "12Q", as an operator reads the table.
                const profiles = [...(g.profiles || [])].sort(
                        (a, b) => a.framebuffer_mb - b.framebuffer_mb ||
                                  (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
                for (const p of profiles) {
                        const tr = el("tr", p.available > 0 ? "profile" : "profile none");
                        tr.dataset.profile = p.name;
                        tr.append(el("td", "profile-name", shortProfile(p.name)),
                                  el("td", "num", p.framebuffer_mb),
                                  el("td", "num profile-available", p.available));
                        body.append(tr);
                }
        }

        function renderHealth(h) {
                const card = $("health");
                card.dataset.available = String(!!h.available);
                $("health-state").textContent = h.available ? "available" : "unavailable";
                $("health-detail").textContent = h.available
                        ? "quarantine after " + h.threshold + " failures"
                        : String(h.unavailable_reason || "no reason given");

                const b = h.breaker || {};
                const bc = $("breaker");
                const state = !b.enabled ? "disabled" : b.open ? "open" : "closed";
                bc.dataset.state = state;
                $("breaker-state").textContent = state;
                let detail = "at most " + b.max_quarantines + " quarantines per " + b.window;
                if (b.open)
                        detail = (b.reason ? String(b.reason) : "open") +
                                 (b.opened_at ? " (since " + b.opened_at + ")" : "");
                $("breaker-detail").textContent = detail;

                const body = $("records").tBodies[0];
                body.replaceChildren();
                const shown = (h.records || []).filter(
                        (r) => r.quarantined_at || (r.failures && r.failures.length));
                for (const r of shown) {
                        const tr = el("tr", r.quarantined_at ? "record quarantined" : "record");
                        tr.dataset.vf = r.vf_address;
                        const q = el("td", "record-reason");
                        if (r.quarantined_at) {
                                q.append(el("span", "record-source", r.source || "quarantined"),
                                         el("span", "record-text", r.reason || ""));
                                q.title = "since " + r.quarantined_at;
                        } else {
                                q.textContent = "–";
                        }
                        tr.append(el("td", "mono", r.vf_address + (r.present ? "" : " (absent)")),
                                  el("td", "num", (r.failures || []).length), q);
                        body.append(tr);
                }
                $("records").hidden = shown.length === 0;
                $("records-empty").hidden = shown.length !== 0;
        }

        function vfCell(vf, records, names) {
                const state = STATES.includes(vf.state) ? vf.state : "unknown";
                const cell = el("div", "vf vf-" + state);
                if (vf.uncertain)
                        cell.classList.add("vf-uncertain");
                cell.dataset.address = vf.address;
                cell.dataset.state = String(vf.state);
                // "0000:e3:00.4" → "00.4": the bus is the GPU's.
                cell.append(el("span", "vf-fn", String(vf.address).split(":").pop()));
                if (vf.failures > 0)
                        cell.append(el("span", "vf-failures", "×" + vf.failures));

                const lines = [vf.address,
                               "state: " + vf.state + (vf.uncertain ? " (uncertain)" : "")];
                if (vf.profile) {
                        cell.append(el("span", "vf-profile", shortProfile(vf.profile)));
                        lines.push("profile: " + vf.profile);
                }
                if (vf.instance_id) {
                        const name = names.get(vf.instance_id);
                        const inst = el("span", "vf-instance", name || vf.instance_id);
                        inst.dataset.instanceId = vf.instance_id;
                        cell.append(inst);
                        lines.push("instance: " +
                                   (name ? name + " (" + vf.instance_id + ")" : vf.instance_id));
                }
                const rec = records.get(vf.address);
                if (rec && rec.quarantined_at) {
                        if (rec.reason)
                                cell.append(el("span", "vf-reason", rec.reason));
                        lines.push("quarantined " + rec.quarantined_at + " by " + rec.source +
                                   (rec.reason ? ": " + rec.reason : ""));
                }
                lines.push("failures: " + vf.failures);
                cell.title = lines.join("\n");
                return cell;
        }

        function gpuCard(gpu, records, names) {
                const card = el("article", "gpu");
                card.dataset.address = gpu.address;
                const head = el("header", "gpu-head");
                const title = el("div", "gpu-title");
                title.append(el("h2", "gpu-address mono", gpu.address),
                             el("span", "gpu-model", gpu.model || "unknown model"));
                if (gpu.drained) {
                        card.classList.add("drained");
                        card.dataset.drained = "true";
                        const badge = el("span", "drained-badge", "drained");
                        badge.title = "since " + gpu.drained.drained_at;
                        title.append(badge, el("span", "drain-reason", gpu.drained.reason));
                }
                const facts = el("dl", "gpu-facts");
                for (const [k, v, cls] of [["framework", gpu.framework, "gpu-framework"],
                                           ["mode", gpu.mode, "gpu-mode"],
                                           ["NVML", gpu.nvml, "gpu-nvml"]]) {
                        const d = el("div");
                        const dd = el("dd", cls, v);
                        if (cls === "gpu-nvml" && v !== "ok")
                                dd.classList.add("degraded");
                        d.append(el("dt", null, k), dd);
                        facts.append(d);
                }
                const counts = {};
                for (const vf of gpu.vfs || [])
                        counts[vf.state] = (counts[vf.state] || 0) + 1;
                const summary = el("div", "gpu-counts");
                for (const s of STATES)
                        if (counts[s])
                                summary.append(el("span", "count count-" + s, counts[s] + " " + s));
                head.append(title, facts, summary);

                const grid = el("div", "vf-grid");
                for (const vf of gpu.vfs || [])
                        grid.append(vfCell(vf, records, names));
                card.append(head, grid);
                return card;
        }

        function render(gpus, health, resources, instances) {
                const names = new Map();
                for (const i of Array.isArray(instances) ? instances : [])
                        names.set(i.id, i.name);
                const records = new Map();
                for (const r of health.records || [])
                        records.set(r.vf_address, r);
                const g = resources.gpu;

                renderBanners(g);
                renderCapacity(g);
                renderHealth(health);

                const list = $("gpus");
                const cards = (gpus.gpus || []).map((gpu) => gpuCard(gpu, records, names));
                if (cards.length === 0)
                        cards.push(el("p", "empty", "No GPU discovered on this host."));
                list.replaceChildren(...cards);
                renderInstances(instances);
                $("host").textContent = location.host;
        }

        // ---- instances and their consoles (CONS-5) -------------------------------------

        function renderInstances(instances) {
                const list = Array.isArray(instances) ? instances : [];
                const rows = list.map((i) => {
                        const tr = el("tr");
                        const open = el("button", "button ghost small", "Console");
                        open.type = "button";
                        open.dataset.instanceId = String(i.id);
                        open.disabled = i.state !== "Running";
                        open.addEventListener("click", () => openConsole(String(i.id),
                                                                         String(i.name)));
                        const cell = el("td");
                        cell.append(open);
                        tr.append(el("td", "mono", i.name), el("td", null, i.state), cell);
                        return tr;
                });
                $("instances").tBodies[0].replaceChildren(...rows);
                $("instances").hidden = rows.length === 0;
                $("instances-empty").hidden = rows.length !== 0;
        }

        let term = null;
        let socket = null;

        function closeConsole() {
                if (socket) {
                        socket.onclose = null;
                        socket.close(1000);
                }
                socket = null;
                if (term)
                        term.dispose();
                term = null;
                $("term-panel").hidden = true;
        }

        // xterm.js styles its rows and colours with <style> elements written at run time, which
        // the page's CSP (style-src 'self') refuses. They go through constructed style sheets
        // instead (CSSOM, which the CSP leaves alone): the same rules, and no inline style.
        function routeStyleElements() {
                if (Document.prototype.createElement.vgpudRouted)
                        return;
                const create = Document.prototype.createElement;
                const routed = function (tag, options) {
                        if (typeof tag !== "string" || tag.toLowerCase() !== "style")
                                return create.call(this, tag, options);
                        const doc = this;
                        const sheet = new CSSStyleSheet();
                        let text = "";
                        const holder = create.call(doc, "template");
                        const setText = (v) => {
                                text = String(v);
                                sheet.replaceSync(text);
                        };
                        Object.defineProperty(holder, "textContent", {get: () => text, set: setText});
                        Object.defineProperty(holder, "innerText", {get: () => text, set: setText});
                        Object.defineProperty(holder, "sheet", {get: () => sheet});
                        doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
                        const remove = holder.remove.bind(holder);
                        holder.remove = () => {
                                doc.adoptedStyleSheets =
                                    doc.adoptedStyleSheets.filter((s) => s !== sheet);
                                remove();
                        };
                        return holder;
                };
                routed.vgpudRouted = true;
                Document.prototype.createElement = routed;
        }

        function openConsole(id, name) {
                const token = readToken();
                if (!token || typeof Terminal !== "function")
                        return;
                closeConsole();
                routeStyleElements();
                $("term-title").textContent = name + " (" + id + ")";
                $("term-status").textContent = "connecting…";
                $("term-panel").hidden = false;
                term = new Terminal({cursorBlink: true, fontSize: 13, scrollback: 5000,
                                     fontFamily: "DejaVu Sans Mono, Liberation Mono, monospace"});
                term.open($("term"));
                const scheme = location.protocol === "https:" ? "wss://" : "ws://";
                const ws = new WebSocket(scheme + location.host + "/instances/" +
                                         encodeURIComponent(id) + "/console/attach",
                                         ["vgpud.console.v1", "bearer." + token]);
                ws.binaryType = "arraybuffer";
                socket = ws;
                const encoder = new TextEncoder();
                ws.onopen = () => {
                        $("term-status").textContent = "connected";
                        term.focus();
                };
                ws.onmessage = (ev) => {
                        if (ev.data instanceof ArrayBuffer)
                                term.write(new Uint8Array(ev.data));
                };
                ws.onclose = (ev) => {
                        $("term-status").textContent = "closed (" + ev.code +
                                                       (ev.reason ? ": " + ev.reason : "") + ")";
                        if (socket === ws)
                                socket = null;
                };
                term.onData((d) => {
                        if (ws.readyState === WebSocket.OPEN)
                                ws.send(encoder.encode(d));
                });
                term.onBinary((d) => {
                        if (ws.readyState === WebSocket.OPEN)
                                ws.send(Uint8Array.from(d, (c) => c.charCodeAt(0) & 0xff));
                });
        }

        // ---- start ------------------------------------------------------------------------

        document.addEventListener("DOMContentLoaded", () => {
                $("signin-form").addEventListener("submit", signIn);
                $("signout").addEventListener("click", signOut);
                $("term-close").addEventListener("click", closeConsole);
                $("refresh").addEventListener("click", () => {
                        if (readToken())
                                start();
                });
                if (readToken())
                        start();
                else
                        showSignin();
        });
})();
