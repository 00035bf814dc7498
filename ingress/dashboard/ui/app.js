// The toolbus operator dashboard: shows the state the server drew into
// the page (dashboard.State, as JSON in #initial-state), then polls
// api/state and shows each answer. Everything in the state is untrusted
// text (ids, messages and method names come from callers and tools), so
// it only ever reaches the page through textContent and attribute
// values, never as markup. The one exception is the charts: SVG the
// server draws from numbers alone (ingress/dashboard/chart.go), parsed
// as SVG, never as HTML.
//
// With authentication on, the API key entered in the form goes to
// api/session once; the server checks it and keeps it in a cookie that
// this script cannot read. Nothing here stores it.
'use strict';

(() => {
  const POLL_MS = 2000;
  const TIMEOUT_MS = 5000;
  // JSON-RPC reserves method names that begin so for its extensions: the
  // ingress's own methods, which the methods table folds away.
  const RESERVED = 'rpc.';

  // What the rows named after a label rather than a method count.
  const LABELS = {
    _unknown: 'calls of methods no worker ever announced, counted together: the names sent are in the recent errors',
    _invalid: 'calls of names the ingress never routes, counted together',
    _other: 'calls of methods past the number the ingress keeps apart, counted together',
  };

  // What the callers' rows named after a label rather than a caller
  // count, as the ingress's metrics name them.
  const CALLER_LABELS = {
    _anonymous: 'the caller of an ingress without authentication',
    _other: 'the callers past the first hundred, counted together',
  };

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
  // Whether the rows of the ingress's own rpc.* methods are folded away.
  let reservedFolded = true;
  // The state shown last, drawn again when a fold opens or closes.
  let shown = null;

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

  function plural(n, noun) {
    return `${count(n)} ${noun}${n === 1 ? '' : 's'}`;
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

  // ---- ids ----

  // shortIds maps each of ids to its distinguishing part: the whole id
  // when it is short, else its shortest end of at least six characters
  // that no other of ids ends with. Ids made by one process (NUIDs, job
  // ids) share a long start and differ at their end.
  function shortIds(ids) {
    const MIN = 6;
    const all = Array.from(new Set(ids.filter((id) => typeof id === 'string' && id !== '')));
    const out = new Map();
    for (const id of all) {
      if (id.length <= 12) { out.set(id, id); continue; }
      let n = MIN;
      while (n < id.length && all.some((o) => o !== id && o.endsWith(id.slice(-n)))) n++;
      out.set(id, n >= id.length - 1 ? id : `…${id.slice(-n)}`);
    }
    return out;
  }

  // idCell is a cell that shows the distinguishing part of id, with the
  // whole id in its title and in what a copy of it takes.
  function idCell(col, id, short, opts = {}) {
    const text = id ? (short.get(id) || id) : dash;
    return cell(col, text, { cls: 'mono id', title: id || '', full: id || '', ...opts });
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
      if (c.full) td.dataset.full = c.full;
      if (c.span) td.colSpan = c.span;
      if (c.svg !== undefined) {
        const node = svgNode(c.svg);
        if (node) td.append(node);
      } else if (c.node) {
        td.append(c.node, document.createTextNode(c.text));
      } else {
        td.textContent = c.text;
      }
      if (c.badge) {
        const badge = document.createElement('span');
        badge.className = `badge ${c.badge.cls}`;
        badge.textContent = c.badge.text;
        badge.title = c.badge.title;
        td.append(' ', badge);
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
      const sig = JSON.stringify([r.cls, r.cells.map((c) => [c.col, c.text, c.cls, c.title, c.full, c.span, c.width, c.svg, c.badge])]);
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

  // processIds maps the ids of the state's ingresses and workers to
  // their distinguishing parts, all compared with each other: an
  // ingress and a worker of one process have ids that differ at the
  // end alone.
  function processIds(s) {
    const ids = [(s.ingress || {}).id];
    for (const r of s.replicas || []) ids.push(r.id);
    for (const w of s.workers || []) ids.push(w.id);
    return shortIds(ids);
  }

  function renderSummary(s, ids) {
    const ing = s.ingress || {};
    const idEl = $('#ingress-id');
    idEl.textContent = ing.id ? (ids.get(ing.id) || ing.id) : dash;
    idEl.title = ing.id || '';
    idEl.dataset.full = ing.id || '';
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
    // A caller is named only when a key was accepted.
    $('#forget-key').hidden = !s.caller;
  }

  function share(n, of) {
    return of > 0 ? n / of : 0;
  }

  // conflictText says what the workers of a method's tool disagree on:
  // which descriptor is kept, which workers announce another, and since
  // when.
  function conflictText(c, row, ids) {
    const others = c.others || [];
    const differs = c.differs || [];
    const tool = c.method === row ? '' : ` of ${c.method}, which serves it,`;
    return `descriptors${tool} conflict since ${clock(c.since)} · ` +
      `kept: the one it was first served with (${plural(c.kept, 'worker')}), which validates params · ` +
      `${plural(others.length, 'worker')} (${others.map((id) => ids.get(id) || id).join(', ')}) ` +
      `${others.length === 1 ? 'announces' : 'announce'} another${differs.length ? `, differing in ${differs.join(', ')}` : ''}`;
  }

  // methodRow is the row of m; a conflict of its tool's descriptors
  // marks it, and takes a line of its own below it.
  function methodRow(m, trends, conflict, ids) {
    const idle = !(m.calls > 0);
    const noWorkers = m.workers === 0;
    const infra = share(m.infra_errors, m.calls);
    const tool = share(m.tool_errors, m.calls);
    const caller = share(m.caller_errors, m.calls);
    const reserved = m.method.startsWith(RESERVED);
    const cls = [infra > 0 && 'warn', noWorkers && 'bad', reserved && 'reserved', conflict && 'conflict'].filter(Boolean).join(' ');
    const t = trends[m.method] || {};
    const of = `of ${count(m.calls)} calls in the last 60 s`;
    const said = conflict ? conflictText(conflict, m.method, ids) : '';
    const badge = conflict ? { cls: 'conflict', text: 'conflict', title: said } : undefined;
    const rows = [{
      cls,
      cells: [
        cell('method', m.method, { cls: 'mono name', title: LABELS[m.method] || m.method, badge }),
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
    }];
    if (conflict) {
      rows.push({
        cls: 'conflict-note',
        cells: [cell('conflict', said, { cls: 'wrap', span: 12, title: `since ${conflict.since}` })],
      });
    }
    return rows;
  }

  // renderMethods shows the user's tools first (the server sorts them
  // so), then, behind a fold, the ingress's own rpc.* methods.
  function renderMethods(s) {
    const trends = {};
    for (const t of (s.trends && s.trends.methods) || []) trends[t.method] = t;
    const conflicts = new Map((s.conflicts || []).map((c) => [c.row, c]));
    const ids = processIds(s);
    const rowsOf = (m) => methodRow(m, trends, conflicts.get(m.method), ids);
    const methods = s.methods || [];
    const own = methods.filter((m) => !m.method.startsWith(RESERVED));
    const reserved = methods.filter((m) => m.method.startsWith(RESERVED));
    const rows = own.flatMap(rowsOf);
    if (reserved.length > 0) {
      const calls = reserved.reduce((n, m) => n + (m.total || 0), 0);
      const label = `${reservedFolded ? '▸ show' : '▾ hide'} the ingress's own ${RESERVED}* methods ` +
        `(${plural(reserved.length, 'method')}, ${plural(calls, 'call')} since start)`;
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'link fold';
      button.setAttribute('aria-expanded', String(!reservedFolded));
      button.textContent = label;
      rows.push({ cls: 'fold-row', cells: [cell('fold', '', { node: button, span: 12, title: label })] });
      if (!reservedFolded) rows.push(...reserved.flatMap(rowsOf));
    }
    fill($('#methods'), rows);
  }

  function renderCluster(s, ids) {
    const t = s.trends || {};
    const ops = Boolean(s.all_callers);
    const scopeName = (id) => (id === 'cluster' ? 'every ingress' : (ids.get(id) || id));
    $('#trend-scope').textContent = t.scope ? `· trends: ${scopeName(t.scope)}, last 15 min` : '';
    const errEl = $('#cluster-error');
    errEl.hidden = !s.cluster_error;
    errEl.textContent = s.cluster_error ? `other ingresses could not be asked: ${s.cluster_error}` : '';
    $('#cluster-operator').hidden = ops;
    $('#inflight-chart-box').hidden = !ops;
    $('#jobs-chart-box').hidden = !ops;
    $('#chart-axis').hidden = !ops;
    $('#replicas').hidden = !ops;
    showChart($('#inflight-chart'), t.in_flight_svg);
    $('#inflight-now').textContent = ops ? `${count(t.in_flight)} now · ${count(t.in_flight_peak)} peak` : dash;
    showChart($('#jobs-chart'), t.jobs_svg);
    // The newest point is the count the jobs section shows.
    $('#jobs-now').textContent = !s.jobs ? 'jobs off' : (t.jobs_svg && t.jobs_queued >= 0 ? `${count(t.jobs_queued)} now` : dash);
    const select = $('#scope');
    select.disabled = !ops;
    const want = [''].concat((s.replicas || []).map((r) => r.id));
    const have = Array.from(select.options, (o) => o.value);
    if (JSON.stringify(want) !== JSON.stringify(have)) {
      select.replaceChildren(...want.map((id) => {
        const o = document.createElement('option');
        o.value = id;
        o.textContent = id === '' ? 'every ingress' : (ids.get(id) || id);
        o.title = id;
        return o;
      }));
    }
    select.value = scope;
    const rows = (s.replicas || []).map((r) => ({
      cls: r.error ? 'bad' : '',
      cells: [
        idCell('id', r.id, ids, r.error ? { title: `${r.id}: ${r.error}` } : {}),
        cell('host', r.host, { cls: 'mono wrap', title: r.host }),
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
    // A limit of -1 is none.
    const of = (used, lim, what) => `${bytes(used)}${lim > 0 ? ` of ${bytes(lim)}` : ''} ${what}`;
    $('#js-memory').textContent = js
      ? `${of(js.memory, js.max_memory, 'memory')}, ${of(js.storage, js.max_storage, 'storage')}`
      : (n.jetstream_error || 'off');
    $('#js-memory').title = js ? 'used, of the limit when there is one' : '';
    $('#js-streams').textContent = js ? `${plural(js.streams, 'stream')}, ${plural(js.consumers, 'consumer')}` : dash;
  }

  function renderWorkers(s, ids) {
    const section = $('#workers');
    const off = s.discovery === false;
    section.classList.toggle('off', off);
    $('#discovery-off').hidden = !off;
    // A worker's methods take a line of their own under its process,
    // as wide as the table, so that a long list is not cut off.
    const rows = (s.workers || []).flatMap((w) => [
      {
        cls: 'worker',
        cells: [
          idCell('id', w.id, ids),
          cell('host', w.host || dash, { cls: 'mono wrap', title: w.host || '' }),
          cell('pid', w.pid ? String(w.pid) : dash, { cls: 'num' }),
          cell('version', w.version || dash, { cls: 'mono wrap', title: w.version || '' }),
          cell('uptime', w.started ? duration(w.uptime_seconds) : dash, { cls: 'num', title: w.started || '' }),
          cell('in_flight', w.host ? count(w.in_flight) : dash, { cls: 'num' }),
        ],
      },
      {
        cls: 'worker-methods',
        cells: [cell('methods', (w.methods || []).join(', '), { cls: 'mono wrap methods', span: 6, title: `the methods of ${w.id}` })],
      },
    ]);
    fill(section, rows);
  }

  // spanText says what a fairness count covers.
  function spanText(f) {
    return f.since_start ? `since start (${duration(f.span_seconds)})` : `last ${Math.round(f.span_seconds)} s`;
  }

  // renderCallers shows the fairness window and each caller's part of
  // it: its queue now, and over the span its calls let in, their wait
  // in the queue and the calls refused, expired or canceled there.
  function renderCallers(s) {
    const section = $('#callers');
    const f = s.fair;
    section.classList.toggle('off', !f);
    $('#fair-off').hidden = Boolean(f);
    const w = f && f.window;
    $('#fair-window').hidden = !w;
    if (w) {
      $('#fair-used').textContent = count(w.used);
      $('#fair-seats').textContent = count(w.seats);
      $('#fair-waiting').textContent = count(w.waiting);
      $('#fair-queued').textContent = count(w.queued);
      $('#fair-hold').textContent = w.hold_ms >= 1000 ? `${fixed(w.hold_ms / 1000, 1)} s` : `${millis(w.hold_ms)} ms`;
    }
    const uncounted = $('#fair-uncounted');
    uncounted.hidden = !f || (f.counted && !f.error);
    uncounted.textContent = f && f.error
      ? `the counts could not be read: ${f.error}`
      : 'the counts are read from the ingress\'s metrics, which are off (--metrics)';
    $('#callers-span').textContent = f && f.counted ? `· ${spanText(f)}` : '';
    // Every caller's share is an operator's to see.
    $('#callers table').classList.toggle('no-share', !w);
    const rows = ((f && f.callers) || []).map((c) => {
      const n = c.counts;
      const of = n ? `${count(n.admitted)} calls let in, ${spanText(f)}` : 'not counted';
      const weight = c.weight ? `weight ${c.weight}` : '';
      return {
        cls: n && n.refused > 0 ? 'warn' : '',
        cells: [
          cell('caller', c.caller, { cls: 'mono name', title: CALLER_LABELS[c.caller] || [c.caller, weight].filter(Boolean).join(', ') }),
          cell('rate', n ? rate(n.rate) : dash, { cls: 'num', title: of }),
          cell('share', n && n.share !== null && n.share !== undefined ? percent(n.share) : dash, { cls: 'num share', title: of }),
          cell('queued', count(c.queued), { cls: 'num', title: `${count(c.in_window)} in the window now` }),
          cell('wait', n && n.admitted > 0 ? millis(n.wait_mean_ms) : dash, { cls: 'num' }),
          cell('wait_p99', n && n.admitted > 0 ? millis(n.wait_p99_ms) : dash, { cls: 'num' }),
          cell('refused', n ? count(n.refused) : dash, { cls: n && n.refused > 0 ? 'num err' : 'num' }),
          cell('expired', n ? count(n.expired) : dash, { cls: n && n.expired > 0 ? 'num err' : 'num' }),
          cell('canceled', n ? count(n.canceled) : dash, { cls: 'num' }),
        ],
      };
    });
    fill(section, rows);
  }

  function renderErrors(s) {
    const groups = s.error_groups || [];
    const traces = shortIds(groups.map((e) => e.trace_id));
    // Without tracing no error has a trace id: the column would be empty.
    $('#errors table').classList.toggle('no-trace', !groups.some((e) => e.trace_id));
    const rows = groups.map((e) => {
      const code = String(e.code);
      return {
        cls: e.class === 'infra' ? 'warn' : '',
        cells: [
          cell('time', clock(e.last, true), { cls: 'tnum', title: e.last || '' }),
          cell('count', `×${count(e.count)}`, { cls: 'num' }),
          // The method as the methods table names its row: a label such
          // as _unknown for names no worker announced, the name sent in
          // the title (and in the message).
          cell('method', e.method, { cls: 'mono name', title: e.sent ? `sent as ${e.sent}` : (LABELS[e.method] || e.method) }),
          cell('code', code, { cls: 'num err', title: CODE_NAMES[code] || 'tool code' }),
          cell('class', e.class, { cls: `class-${e.class}` }),
          cell('message', e.message, { cls: 'wrap message' }),
          cell('id', e.id, { cls: 'mono name', title: e.id }),
          e.trace_id ? idCell('trace_id', e.trace_id, traces) : cell('trace_id', ''),
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
    const recent = j.recent || [];
    const ids = shortIds(recent.map((job) => job.id));
    const rows = recent.map((job) => {
      const known = JOB_STATES.includes(job.state);
      const p = job.percent;
      // A job under way shows how far it got beside its state.
      const hasP = typeof p === 'number' && Number.isFinite(p) && !['succeeded', 'failed', 'canceled'].includes(job.state);
      const state = hasP ? `${job.state} ${Math.round(p)}%` : job.state;
      const stateCls = known ? `state state-${job.state}` : 'state';
      return {
        cells: [
          idCell('id', job.id, ids),
          cell('method', job.method, { cls: 'mono name', title: job.method }),
          hasP
            ? cell('state', state, { cls: stateCls, node: progressBar(p), width: p })
            : cell('state', state, { cls: stateCls }),
          job.error
            ? cell('message', `${job.error.code} ${job.error.message}`, { cls: 'wrap message err' })
            : cell('message', job.message || '', { cls: 'wrap message' }),
          cell('created', clock(job.created), { cls: 'tnum', title: job.created || '' }),
        ],
      };
    });
    fill(section, rows);
  }

  function render(s) {
    shown = s;
    const ids = processIds(s);
    setEmpty(null);
    renderSummary(s, ids);
    renderMethods(s);
    renderCluster(s, ids);
    renderWorkers(s, ids);
    renderCallers(s);
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

  // askForKey shows the API key form; polling waits for it, since asking
  // again without a key could only be refused again. Without a note of
  // its own the form keeps the one the server wrote into the page.
  function askForKey(note) {
    const form = $('#auth');
    if (note) $('#auth-note').textContent = note;
    form.hidden = false;
    if (!shown) {
      setEmpty('Enter an API key to see this.');
      $('#nats-operator').textContent = 'Enter an API key to see this.';
    }
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

  // LoadError is a failed request; its message is the reason the banner
  // shows.
  class LoadError extends Error {}

  // request sends one request to the ingress within TIMEOUT_MS. It
  // returns {state} for an answer with a state, {done} for one without
  // a body, or {unauthorized, reason} on a 401, and throws a LoadError
  // on any other failure. The browser sends the key's cookie itself.
  async function request(url, init = {}) {
    const ctrl = new AbortController();
    let timedOut = false;
    const deadline = setTimeout(() => { timedOut = true; ctrl.abort(); }, TIMEOUT_MS);
    const fail = (err, what) => {
      if (timedOut) return new LoadError(`no answer within ${TIMEOUT_MS / 1000} s`);
      return new LoadError(`${what}: ${err && err.message ? err.message : err}`);
    };
    try {
      let resp;
      try {
        resp = await fetch(url, {
          cache: 'no-store', credentials: 'same-origin', signal: ctrl.signal, ...init,
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
      if (resp.status === 204) return { done: true };
      try {
        return { state: await resp.json() };
      } catch (err) {
        throw fail(err, 'unreadable answer');
      }
    } finally {
      clearTimeout(deadline);
    }
  }

  // load fetches the state of the chosen scope.
  function load() {
    const url = scope ? `api/state?replica=${encodeURIComponent(scope)}` : 'api/state';
    return request(url, { headers: { Accept: 'application/json' } });
  }

  let timer = 0;
  let busy = false;

  function pollIn(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  // show renders a state that was just read, and notes the time of the
  // first one the page showed.
  function show(s) {
    render(s);
    connected();
    $('#auth').hidden = true;
    painted();
  }

  // painted lets the page be painted, once it shows what it should
  // (see html.loading in style.css), and notes when.
  function painted() {
    const root = document.documentElement;
    if (!root.classList.contains('loading')) return;
    root.classList.remove('loading');
    performance.mark('toolbus-rendered');
  }

  // poll loads and shows the state, then schedules the next poll. A
  // failure to load shows the banner and polling goes on; a failure to
  // render is a bug of the page and is thrown on to the console.
  async function poll() {
    if (busy) return;
    busy = true;
    let next = POLL_MS;
    try {
      const got = await load();
      if (got.unauthorized) {
        askForKey(shown ? `The key is no longer accepted${got.reason ? ` (${got.reason})` : ''}.` : '');
        disconnected(shown ? 'API key refused' : 'API key required');
        next = 0;
        return;
      }
      show(got.state);
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

  // signIn hands the key to the server, which checks it and keeps it in
  // a cookie, and answers the key's state.
  async function signIn(key) {
    const note = $('#auth-note');
    note.textContent = '';
    try {
      const got = await request('api/session', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
        body: JSON.stringify({ key }),
      });
      if (got.unauthorized) {
        note.textContent = `The key was refused${got.reason ? ` (${got.reason})` : ''}.`;
        $('#auth-key').focus();
        return;
      }
      $('#auth').hidden = true;
      show(got.state);
      pollIn(POLL_MS);
    } catch (err) {
      if (!(err instanceof LoadError)) throw err;
      note.textContent = `The key could not be checked: ${err.message}.`;
    }
  }

  // signOut makes the server drop the key's cookie, then loads the page
  // again, which shows no data without a key.
  async function signOut() {
    clearTimeout(timer);
    try {
      await request('api/session', { method: 'DELETE' });
    } catch (err) {
      if (!(err instanceof LoadError)) throw err;
      disconnected(`the key could not be forgotten: ${err.message}`);
      return;
    }
    window.location.reload();
  }

  // initialState is the state the server drew into the page, or null
  // when it asks for a key.
  function initialState() {
    const el = document.getElementById('initial-state');
    try {
      return el ? JSON.parse(el.textContent || 'null') : null;
    } catch {
      return null;
    }
  }

  function start() {
    $('#auth').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('#auth-key');
      const key = input.value.trim();
      if (!key) return;
      input.value = '';
      signIn(key);
    });
    $('#forget-key').addEventListener('click', signOut);
    $('#scope').addEventListener('change', (ev) => {
      scope = ev.target.value;
      pollIn(0);
    });
    $('#methods tbody').addEventListener('click', (ev) => {
      if (!ev.target.closest('button.fold')) return;
      reservedFolded = !reservedFolded;
      if (shown) renderMethods(shown);
    });
    // A copy of a shortened id takes the whole id.
    document.addEventListener('copy', (ev) => {
      const sel = document.getSelection();
      const node = sel && sel.anchorNode;
      const el = node && (node.nodeType === 1 ? node : node.parentElement);
      const full = el && el.closest('[data-full]');
      if (!full || !full.dataset.full || !full.contains(sel.focusNode)) return;
      ev.clipboardData.setData('text/plain', full.dataset.full);
      ev.preventDefault();
    });
    const first = initialState();
    if (first) {
      show(first);
      pollIn(POLL_MS);
      return;
    }
    // The page was drawn without a key's cookie. A browser leaves a
    // SameSite=Strict cookie off a navigation that another site started,
    // yet sends it with this page's own requests: ask once before
    // asking for a key.
    askForKey('');
    painted();
    poll();
  }

  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
