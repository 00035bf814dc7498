// The toolbus operator dashboard: polls api/state (dashboard.State) and
// renders it. Everything in the state is untrusted text (ids, messages
// and method names come from callers and tools), so it only ever reaches
// the page through textContent and attribute values, never as markup.
// The one exception is the charts: SVG the server draws from numbers
// alone (ingress/dashboard/chart.go), parsed as SVG, never as HTML.
'use strict';

(() => {
  const POLL_MS = 2000;
  const TIMEOUT_MS = 5000;
  const KEY_STORE = 'toolbus.dashboard.apiKey';

  const JOB_STATES = ['queued', 'running', 'succeeded', 'failed', 'canceled'];

  // Names of the JSON-RPC and toolbus error codes, shown as a tooltip.
  const CODE_NAMES = {
    '-32700': 'parse error',
    '-32600': 'invalid request',
    '-32601': 'method not found',
    '-32602': 'invalid params',
    '-32603': 'internal error',
    '-32000': 'tool error',
    '-32001': 'timed out',
    '-32002': 'overloaded or rate limited',
    '-32003': 'unavailable',
    '-32004': 'canceled',
    '-32005': 'forbidden',
    '-32006': 'limit exceeded',
  };

  const $ = (sel) => document.querySelector(sel);

  // Which trends to show: '' for the cluster's, else a replica's id.
  let scope = '';

  // svgNode parses a chart the server drew; an empty one is no node.
  function svgNode(markup) {
    if (!markup) return null;
    const doc = new DOMParser().parseFromString(markup, 'image/svg+xml');
    const el = doc.documentElement;
    return el && el.nodeName === 'svg' ? document.importNode(el, true) : null;
  }

  function showChart(box, markup) {
    const node = svgNode(markup);
    if (node) box.replaceChildren(node); else box.replaceChildren();
  }

  // setEmpty sets what every empty section says: why it is empty, once
  // the state was loaded, or what is missing before.
  function setEmpty(text) {
    for (const p of document.querySelectorAll('section .empty')) {
      p.textContent = text === null ? p.dataset.empty : text;
    }
  }

  function bytes(n) {
    if (!Number.isFinite(n) || n < 0) return dash;
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
  }

  // The API key lives in sessionStorage, which a browser may refuse to
  // open; the page then works without remembering it.
  const keyStore = {
    get() {
      try { return sessionStorage.getItem(KEY_STORE) || ''; } catch { return ''; }
    },
    set(v) {
      try { sessionStorage.setItem(KEY_STORE, v); } catch { /* not kept */ }
    },
    clear() {
      try { sessionStorage.removeItem(KEY_STORE); } catch { /* nothing kept */ }
    },
  };

  // ---- formatting ----

  const dash = '—';

  function fixed(n, digits) {
    return Number.isFinite(n) ? n.toFixed(digits) : dash;
  }

  function rate(n) {
    if (!Number.isFinite(n)) return dash;
    return n === 0 ? '0' : fixed(n, n < 10 ? 2 : 1);
  }

  function millis(n) {
    if (!Number.isFinite(n)) return dash;
    if (n < 1) return fixed(n, 2);
    if (n < 100) return fixed(n, 1);
    return fixed(n, 0);
  }

  function percent(fraction) {
    if (!Number.isFinite(fraction)) return dash;
    return fraction === 0 ? '0' : fixed(fraction * 100, 1);
  }

  function count(n) {
    return Number.isFinite(n) ? n.toLocaleString('en-US') : dash;
  }

  function duration(seconds) {
    if (!Number.isFinite(seconds) || seconds < 0) return dash;
    const s = Math.floor(seconds);
    const d = Math.floor(s / 86400);
    const h = Math.floor((s % 86400) / 3600);
    const m = Math.floor((s % 3600) / 60);
    const pad = (x) => String(x).padStart(2, '0');
    if (d > 0) return `${d}d ${h}h`;
    if (h > 0) return `${h}h ${pad(m)}m`;
    if (m > 0) return `${m}m ${pad(s % 60)}s`;
    return `${s}s`;
  }

  function parseTime(v) {
    const t = Date.parse(v);
    return Number.isNaN(t) ? null : t;
  }

  // clock shows a time of day in the browser's zone, with milliseconds
  // when asked; the full timestamp goes in the cell's title.
  function clock(v, ms) {
    const t = parseTime(v);
    if (t === null) return dash;
    const d = new Date(t);
    const pad = (x, n = 2) => String(x).padStart(n, '0');
    let s = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (ms) s += `.${pad(d.getMilliseconds(), 3)}`;
    return s;
  }

  // ---- tables ----

  // cell describes one td: its column (data-col, for tests and styling),
  // its text, and optional class, title and child node.
  function cell(col, text, opts = {}) {
    return { col, text: text === null || text === undefined ? '' : String(text), ...opts };
  }

  const signatures = new WeakMap();

  function buildRow(r) {
    const tr = document.createElement('tr');
    if (r.cls) tr.className = r.cls;
    for (const c of r.cells) {
      const td = document.createElement('td');
      td.dataset.col = c.col;
      if (c.cls) td.className = c.cls;
      if (c.title) td.title = c.title;
      if (c.svg !== undefined) {
        const node = svgNode(c.svg);
        if (node) td.append(node);
      } else if (c.node) {
        td.append(c.node, document.createTextNode(c.text));
      } else {
        td.textContent = c.text;
      }
      tr.append(td);
    }
    return tr;
  }

  // fill puts rows in the section's tbody. A row whose content has not
  // changed keeps its element, so that a selection in it (an id being
  // copied) survives the next poll.
  function fill(section, rows) {
    const tbody = section.querySelector('tbody');
    const old = Array.from(tbody.rows);
    rows.forEach((r, i) => {
      const sig = JSON.stringify([r.cls, r.cells.map((c) => [c.col, c.text, c.cls, c.title, c.width, c.svg])]);
      const cur = old[i];
      if (cur && signatures.get(cur) === sig) return;
      const tr = buildRow(r);
      signatures.set(tr, sig);
      if (cur) cur.replaceWith(tr); else tbody.append(tr);
    });
    for (let i = rows.length; i < old.length; i++) old[i].remove();
    section.classList.toggle('is-empty', rows.length === 0);
  }

  // ---- sections ----

  function renderSummary(s) {
    const ing = s.ingress || {};
    $('#ingress-id').textContent = ing.id || dash;
    // One page per replica: the tab says which.
    document.title = ing.id ? `toolbus ${ing.id}` : 'toolbus dashboard';
    $('#uptime').textContent = duration(ing.uptime_seconds);
    $('#uptime').title = ing.started ? `started ${ing.started}` : '';
    $('#inflight').textContent = count(ing.in_flight);
    $('#updated').textContent = clock(s.now);
    $('#updated').title = s.now || '';
    $('#window').textContent = Number.isFinite(s.window_seconds) ? `last ${s.window_seconds} s` : '';
    // With authentication on, a caller sees its own data; an operator all.
    $('#viewer-item').hidden = !s.caller;
    $('#viewer').textContent = s.caller ? (s.all_callers ? `${s.caller} (operator)` : s.caller) : dash;
    $('#viewer').title = s.all_callers
      ? 'every caller\'s jobs and errors, every method'
      : 'your own jobs and errors, and the methods you may call';
  }

  function share(n, of) {
    return of > 0 ? n / of : 0;
  }

  function renderMethods(s) {
    const trends = {};
    for (const t of (s.trends && s.trends.methods) || []) trends[t.method] = t;
    const rows = (s.methods || []).map((m) => {
      const idle = !(m.calls > 0);
      const noWorkers = m.workers === 0;
      const infra = share(m.infra_errors, m.calls);
      const tool = share(m.tool_errors, m.calls);
      const caller = share(m.caller_errors, m.calls);
      const cls = [infra > 0 && 'warn', noWorkers && 'bad'].filter(Boolean).join(' ');
      const t = trends[m.method] || {};
      const of = `of ${count(m.calls)} calls in the last 60 s`;
      return {
        cls,
        cells: [
          cell('method', m.method, { cls: 'mono', title: m.method }),
          cell('rate', rate(m.rate), { cls: 'num' }),
          cell('rate_trend', '', { cls: 'spark', svg: t.rate_svg || '', title: t.method ? `peak ${rate(t.peak_rate)}/s, ${count(t.calls)} calls in 15 min` : 'no calls in 15 min' }),
          cell('tool_errors', percent(tool), { cls: tool > 0 ? 'num toolerr' : 'num', title: `${count(m.tool_errors)} ${of}` }),
          cell('infra_errors', percent(infra), { cls: infra > 0 ? 'num err' : 'num', title: `${count(m.infra_errors)} ${of}` }),
          cell('caller_errors', percent(caller), { cls: 'num', title: `${count(m.caller_errors)} ${of}` }),
          cell('errors_trend', '', { cls: 'spark', svg: t.errors_svg || '', title: t.method ? `${count(t.tool_errors)} tool, ${count(t.infra_errors)} infrastructure, ${count(t.caller_errors)} caller errors in 15 min` : '' }),
          cell('p99', idle ? dash : millis(m.p99_ms), { cls: 'num', title: idle ? '' : `p50 ${millis(m.p50_ms)} ms` }),
          cell('p99_trend', '', { cls: 'spark', svg: t.p99_svg || '', title: t.method ? `peak ${millis(t.peak_p99_ms)} ms` : '' }),
          cell('in_flight', count(m.in_flight), { cls: 'num' }),
          cell('workers', m.workers === null || m.workers === undefined ? dash : count(m.workers), {
            cls: noWorkers ? 'num err' : 'num',
            title: noWorkers ? 'no live worker serves this method' : '',
          }),
          cell('total', count(m.total), { cls: 'num' }),
        ],
      };
    });
    fill($('#methods'), rows);
  }

  function renderCluster(s) {
    const t = s.trends || {};
    const ops = Boolean(s.all_callers);
    $('#trend-scope').textContent = t.scope ? `· trends: ${t.scope === 'cluster' ? 'every ingress' : t.scope}, last 15 min` : '';
    const errEl = $('#cluster-error');
    errEl.hidden = !s.cluster_error;
    errEl.textContent = s.cluster_error ? `other ingresses could not be asked: ${s.cluster_error}` : '';
    $('#cluster-operator').hidden = ops;
    $('#inflight-chart-box').hidden = !ops;
    $('#jobs-chart-box').hidden = !ops;
    $('#replicas').hidden = !ops;
    showChart($('#inflight-chart'), t.in_flight_svg);
    $('#inflight-now').textContent = ops ? `${count(t.in_flight)} now, ${count(t.in_flight_peak)} peak` : dash;
    showChart($('#jobs-chart'), t.jobs_svg);
    $('#jobs-now').textContent = t.jobs_svg && t.jobs_queued >= 0 ? `${count(t.jobs_queued)} now` : dash;
    $('#jobs-chart-hint').textContent = s.jobs ? 'read when this page loads the jobs' : 'jobs off';
    const select = $('#scope');
    select.disabled = !ops;
    const want = [''].concat((s.replicas || []).map((r) => r.id));
    const have = Array.from(select.options, (o) => o.value);
    if (JSON.stringify(want) !== JSON.stringify(have)) {
      select.replaceChildren(...want.map((id) => {
        const o = document.createElement('option');
        o.value = id;
        o.textContent = id === '' ? 'every ingress' : id;
        return o;
      }));
    }
    select.value = scope;
    const rows = (s.replicas || []).map((r) => ({
      cls: r.error ? 'bad' : '',
      cells: [
        cell('id', r.id, { cls: 'mono', title: r.error || r.id }),
        cell('host', r.host, { cls: 'mono clip', title: r.host }),
        cell('pid', r.pid ? String(r.pid) : dash, { cls: 'num' }),
        cell('uptime', duration(r.uptime_seconds), { cls: 'num' }),
        cell('in_flight', count(r.in_flight), { cls: 'num' }),
      ],
    }));
    fill($('#cluster'), rows);
    $('#cluster').classList.remove('is-empty');
  }

  function renderNATS(s) {
    const n = s.nats;
    $('#nats-info').hidden = !n;
    $('#nats-operator').hidden = Boolean(n);
    $('#nats-operator').textContent = 'shown to operators';
    if (!n) return;
    $('#nats-server').textContent = n.connected
      ? `${n.server_name || n.server_id} ${n.server_version ? `(v${n.server_version})` : ''}`
      : n.status;
    $('#nats-server').title = n.url || '';
    $('#nats-server').className = n.connected ? '' : 'err';
    $('#nats-cluster').textContent = n.cluster || 'none (one server)';
    $('#nats-rtt').textContent = n.connected ? `${millis(n.rtt_ms)} ms, ${count(n.reconnects)} reconnects` : dash;
    $('#nats-servers').textContent = (n.servers || []).join(', ') || dash;
    const js = n.jetstream;
    const of = (used, lim) => (lim > 0 ? `${bytes(used)} of ${bytes(lim)}` : `${bytes(used)}, no limit`);
    $('#js-memory').textContent = js ? of(js.memory, js.max_memory) : (n.jetstream_error || 'off');
    $('#js-storage').textContent = js ? of(js.storage, js.max_storage) : dash;
    $('#js-streams').textContent = js ? `${count(js.streams)}, ${count(js.consumers)}` : dash;
  }

  function renderWorkers(s) {
    const section = $('#workers');
    const off = s.discovery === false;
    section.classList.toggle('off', off);
    $('#discovery-off').hidden = !off;
    const rows = (s.workers || []).map((w) => {
      const methods = (w.methods || []).join(', ');
      return {
        cells: [
          cell('id', w.id, { cls: 'mono', title: w.id }),
          cell('host', w.host || dash, { cls: 'mono clip', title: w.host || '' }),
          cell('pid', w.pid ? String(w.pid) : dash, { cls: 'num' }),
          cell('version', w.version || dash, { cls: 'mono clip', title: w.version || '' }),
          cell('uptime', w.started ? duration(w.uptime_seconds) : dash, { cls: 'num', title: w.started || '' }),
          cell('in_flight', w.host ? count(w.in_flight) : dash, { cls: 'num' }),
          cell('methods', methods, { cls: 'mono wrap' }),
        ],
      };
    });
    fill(section, rows);
  }

  function renderErrors(s) {
    const rows = (s.error_groups || []).map((e) => {
      const code = String(e.code);
      return {
        cls: e.class === 'infra' ? 'warn' : '',
        cells: [
          cell('time', clock(e.last, true), { cls: 'tnum', title: e.last || '' }),
          cell('count', `×${count(e.count)}`, { cls: 'num' }),
          cell('method', e.method, { cls: 'mono', title: e.method }),
          cell('code', code, { cls: 'num err', title: CODE_NAMES[code] || 'tool code' }),
          cell('class', e.class, { cls: `class-${e.class}` }),
          cell('message', e.message, { cls: 'clip', title: e.message }),
          cell('id', e.id, { cls: 'mono clip', title: e.id }),
          cell('trace_id', e.trace_id || '', { cls: 'mono clip', title: e.trace_id || '' }),
        ],
      };
    });
    fill($('#errors'), rows);
  }

  function progressBar(p) {
    const bar = document.createElement('span');
    bar.className = 'bar';
    const fillEl = document.createElement('span');
    fillEl.className = 'fill';
    fillEl.style.width = `${Math.min(100, Math.max(0, p))}%`;
    bar.append(fillEl);
    return bar;
  }

  function renderJobCounts(byState) {
    const states = JOB_STATES.concat(Object.keys(byState).filter((k) => !JOB_STATES.includes(k)).sort());
    const list = $('#job-counts');
    list.replaceChildren(...states.map((st) => {
      const li = document.createElement('li');
      li.dataset.state = st;
      if (JOB_STATES.includes(st)) li.className = `state-${st}`;
      const n = document.createElement('strong');
      n.textContent = count(byState[st] || 0);
      li.append(n, document.createTextNode(` ${st}`));
      return li;
    }));
  }

  function renderJobs(s) {
    const section = $('#jobs');
    const j = s.jobs;
    section.classList.toggle('off', !j);
    $('#jobs-off').hidden = !!j;
    const errEl = $('#jobs-error');
    errEl.hidden = !(j && j.error);
    errEl.textContent = j && j.error ? `jobs could not be read: ${j.error}` : '';
    $('#jobs-truncated').hidden = !(j && j.truncated);
    if (!j) {
      $('#job-counts').replaceChildren();
      fill(section, []);
      return;
    }
    renderJobCounts(j.by_state || {});
    const rows = (j.recent || []).map((job) => {
      const known = JOB_STATES.includes(job.state);
      const p = job.percent;
      const hasP = typeof p === 'number' && Number.isFinite(p);
      return {
        cells: [
          cell('id', job.id, { cls: 'mono', title: job.id }),
          cell('method', job.method, { cls: 'mono', title: job.method }),
          cell('state', job.state, { cls: known ? `state state-${job.state}` : 'state' }),
          hasP
            ? cell('progress', `${Math.round(p)}%`, { cls: 'progress', node: progressBar(p), width: p })
            : cell('progress', dash, { cls: 'progress' }),
          job.error
            ? cell('message', `${job.error.code} ${job.error.message}`, { cls: 'clip err', title: `${job.error.code} ${job.error.message}` })
            : cell('message', job.message || '', { cls: 'clip', title: job.message || '' }),
          cell('created', clock(job.created), { cls: 'tnum', title: job.created || '' }),
        ],
      };
    });
    fill(section, rows);
  }

  function render(s) {
    setEmpty(null);
    renderSummary(s);
    renderMethods(s);
    renderCluster(s);
    renderWorkers(s);
    renderErrors(s);
    renderNATS(s);
    renderJobs(s);
    document.body.dataset.updated = s.now || '';
  }

  // ---- connection ----

  function connected() {
    $('#banner').hidden = true;
    document.body.classList.remove('stale');
  }

  function disconnected(reason) {
    const b = $('#banner');
    b.textContent = `disconnected: ${reason}`;
    b.hidden = false;
    document.body.classList.add('stale');
  }

  function showForgetKey() {
    $('#forget-key').hidden = !keyStore.get();
  }

  // askForKey shows the API key form; polling waits for it, since asking
  // again without a key could only be refused again.
  function askForKey(refused, reason) {
    const form = $('#auth');
    $('#auth-note').textContent = refused
      ? `The key was refused${reason ? ` (${reason})` : ''}.`
      : '';
    form.hidden = false;
    setEmpty('Enter an API key to see this.');
    $('#nats-operator').textContent = 'Enter an API key to see this.';
    $('#auth-key').focus();
  }

  // errorText reads a short reason from an error answer: the JSON-RPC
  // error's data.reason or message, or the start of the body.
  async function errorText(resp) {
    let body = '';
    try { body = await resp.text(); } catch { return ''; }
    try {
      const v = JSON.parse(body);
      const e = v && v.error;
      if (e) return (e.data && e.data.reason) || e.message || '';
    } catch { /* not JSON */ }
    return body.trim().slice(0, 200);
  }

  // LoadError is a failed poll; its message is the reason the banner
  // shows.
  class LoadError extends Error {}

  // load fetches the state. It returns {state}, or {unauthorized, reason}
  // on a 401, and throws a LoadError on any other failure.
  async function load(key) {
    const ctrl = new AbortController();
    let timedOut = false;
    const deadline = setTimeout(() => { timedOut = true; ctrl.abort(); }, TIMEOUT_MS);
    const fail = (err, what) => {
      if (timedOut) return new LoadError(`no answer within ${TIMEOUT_MS / 1000} s`);
      return new LoadError(`${what}: ${err && err.message ? err.message : err}`);
    };
    try {
      const headers = { Accept: 'application/json' };
      if (key) headers.Authorization = `Bearer ${key}`;
      let resp;
      try {
        const url = scope ? `api/state?replica=${encodeURIComponent(scope)}` : 'api/state';
        resp = await fetch(url, {
          headers, cache: 'no-store', credentials: 'same-origin', signal: ctrl.signal,
        });
      } catch (err) {
        throw fail(err, 'cannot reach the ingress');
      }
      if (resp.status === 401) {
        return { unauthorized: true, reason: await errorText(resp) };
      }
      if (!resp.ok) {
        const reason = await errorText(resp);
        throw new LoadError(`HTTP ${resp.status}${reason ? `: ${reason}` : ''}`);
      }
      try {
        return { state: await resp.json() };
      } catch (err) {
        throw fail(err, 'unreadable answer');
      }
    } finally {
      clearTimeout(deadline);
    }
  }

  let timer = 0;
  let busy = false;

  function pollIn(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  // poll loads and shows the state, then schedules the next poll. A
  // failure to load shows the banner and polling goes on; a failure to
  // render is a bug of the page and is thrown on to the console.
  async function poll() {
    if (busy) return;
    busy = true;
    let next = POLL_MS;
    try {
      const key = keyStore.get();
      const got = await load(key);
      if (got.unauthorized) {
        keyStore.clear();
        showForgetKey();
        askForKey(Boolean(key), got.reason);
        disconnected(key ? 'API key refused' : 'API key required');
        next = 0;
        return;
      }
      render(got.state);
      connected();
    } catch (err) {
      if (!(err instanceof LoadError)) {
        disconnected(`the page failed to show the state: ${err}`);
        throw err;
      }
      disconnected(err.message);
    } finally {
      busy = false;
      if (next) pollIn(next);
    }
  }

  function start() {
    $('#auth').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('#auth-key');
      const key = input.value.trim();
      if (!key) return;
      keyStore.set(key);
      input.value = '';
      $('#auth').hidden = true;
      showForgetKey();
      pollIn(0);
    });
    $('#forget-key').addEventListener('click', () => {
      keyStore.clear();
      showForgetKey();
      pollIn(0);
    });
    $('#scope').addEventListener('change', (ev) => {
      scope = ev.target.value;
      pollIn(0);
    });
    showForgetKey();
    poll();
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
