// Real-client driver for syncpipe's end-to-end test (internal/testkit/clienttest).
//
// It opens a fresh @powersync/node database (node:sqlite driver, PowerSync
// core extension shipped in the npm package, default Rust sync client),
// connects to a syncpipe sync API over the HTTP streaming transport, or
// over WebSocket (RSocket) with --connection-method web-socket, and
// reports what it sees as JSON lines on stdout:
//
//   {"event":"first_sync","lists":N,"todos":M}
//   {"event":"count","todos":K}               answer to a wait command
//   {"event":"rows","rows":[...]}              answer to a query command
//   {"event":"error","message":...}           then exit code 1
//   {"event":"bye"}                            answer to exit
//
// Commands are read from stdin, one JSON object per line:
//
//   {"cmd":"wait","todos":K}                   wait until SELECT count(*) FROM todos = K
//   {"cmd":"wait","lists":L,"todos":K}         both counts
//   {"cmd":"wait","sql":"SELECT count(*) ...","n":K}
//                                              any single-value query equal to K
//   optional "timeout_ms" (default 60000) on wait
//   {"cmd":"query","sql":"SELECT ...","params":[...]}
//   {"cmd":"subscribe","stream":NAME,"params":{...}}
//                                              db.syncStream(NAME, params).subscribe()
//                                              and its waitForFirstSync(), answered
//                                              {"event":"subscribed"}
//   optional "ttl" (seconds) on subscribe
//   {"cmd":"unsubscribe","stream":NAME,"params":{...}}
//                                              unsubscribe() of the handles subscribe made
//                                              (the TTL starts), answered {"event":"unsubscribed"}
//   {"cmd":"unsubscribe_all","stream":NAME,"params":{...}}
//                                              that stream's unsubscribeAll(), answered
//                                              {"event":"unsubscribed"}
//   {"cmd":"request_checkpoint"}               db.requestCheckpoint() and its waitForSync()
//                                              (with --checkpoint-mode requests), answered
//                                              {"event":"checkpoint_synced"}
//   {"cmd":"set_token","token":JWT}           the token fetchCredentials returns from now
//                                              on (the SDK fetches one when its token
//                                              expires), answered {"event":"token_set"}
//   {"cmd":"exit"}                             disconnect, close, exit 0 (also on EOF)
//
// With --report-priority P, the first sync status in which priority P has
// synced is reported as {"event":"priority_synced","priority":P,"has_synced":B}
// (B: whether the whole first sync had too; false shows that a
// partial_checkpoint_complete reached the SDK), before first_sync. With
// --report-connection, each change of the status's connected flag after
// the first sync is reported as {"event":"connection","connected":B}.
//
// Usage: node sync.mjs --endpoint URL --token JWT [--lists N --todos M]
// [--accept-encoding CODINGS] [--checkpoint-mode legacy|requests]
// [--connection-method http|web-socket] (or SYNCPIPE_ENDPOINT / SYNCPIPE_TOKEN).
// --accept-encoding replaces the Accept-Encoding that Node's fetch sends
// ("gzip, deflate") on the SDK's requests, e.g. "zstd, gzip" as browsers
// send it; Node's fetch decodes zstd responses itself. The SDK is not
// changed: it takes the fetch through its remoteOptions. With --lists/--todos the first
// sync counts are checked here too. Every SDK log line goes to stderr;
// any SDK log at warn level or above (the Rust client reports checksum
// validation failures as "Checksums didn't match, failed for: ..." at warn)
// and any download error in the sync status is a failure.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { parseArgs } from 'node:util';

import {
  column,
  LogLevels,
  PowerSyncDatabase,
  Schema,
  SyncStreamConnectionMethod,
  Table
} from '@powersync/node';

const { values: args } = parseArgs({
  options: {
    endpoint: { type: 'string', default: process.env.SYNCPIPE_ENDPOINT },
    token: { type: 'string', default: process.env.SYNCPIPE_TOKEN },
    lists: { type: 'string' },
    todos: { type: 'string' },
    'first-sync-timeout-ms': { type: 'string', default: '120000' },
    'accept-encoding': { type: 'string' },
    'checkpoint-mode': { type: 'string', default: 'legacy' },
    'connection-method': { type: 'string', default: 'http' },
    'report-priority': { type: 'string' },
    'report-connection': { type: 'boolean', default: false },
    driver: { type: 'string', default: process.env.SYNCPIPE_CLIENT_DRIVER ?? 'node:sqlite' }
  }
});

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

let closing = false;
let failed = false;
// subscriptions holds the stream subscriptions made by commands.
const subscriptions = [];

function errText(e) {
  if (e == null) return undefined;
  if (e instanceof Error) return e.stack ?? e.message;
  return typeof e === 'string' ? e : JSON.stringify(e);
}

function fail(message, error) {
  if (failed) return;
  failed = true;
  emit({ event: 'error', message, error: errText(error) });
  // Give stdout a moment to flush; do not wait for a clean close.
  setTimeout(() => process.exit(1), 50);
}

if (!args.endpoint || !args.token) {
  fail('usage: node sync.mjs --endpoint URL --token JWT (or SYNCPIPE_ENDPOINT / SYNCPIPE_TOKEN)');
} else {
  await main().catch((e) => fail('driver failed', e));
}

async function main() {
  const levelNames = { 10: 'trace', 20: 'debug', 30: 'info', 40: 'warn', 50: 'error' };
  const logger = {
    log({ level, message, error }) {
      const name = levelNames[level] ?? String(level);
      const ms = String(Math.round(performance.now())).padStart(6);
      process.stderr.write(`${ms}ms [powersync ${name}] ${message}${error ? ': ' + errText(error) : ''}\n`);
      if (level >= LogLevels.warn && !closing) {
        const kind = /checksum/i.test(message) ? 'checksum' : 'sdk';
        fail(`${kind}: ${message}`, error);
      }
    }
  };

  const schema = new Schema({
    lists: new Table({ name: column.text, owner_id: column.text }),
    todos: new Table(
      {
        list_id: column.text,
        description: column.text,
        completed: column.integer,
        created_at: column.text
      },
      { indexes: { list: ['list_id'] } }
    )
  });

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'syncpipe-client-'));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));

  const acceptEncoding = args['accept-encoding'];
  const remoteOptions = acceptEncoding
    ? {
        customFetch: (resource, init = {}) => {
          const headers = new Headers(init.headers);
          headers.set('accept-encoding', acceptEncoding);
          return fetch(resource, { ...init, headers });
        }
      }
    : undefined;
  const db = new PowerSyncDatabase({
    schema,
    database: { dbFilename: 'client.db', dbLocation: dir, implementation: { type: args.driver } },
    remoteOptions,
    logger
  });
  await db.init();

  const reportPriority = args['report-priority'] === undefined ? undefined : Number(args['report-priority']);
  let priorityReported = false;
  let connected = null; // reported once the first sync is done
  db.registerListener({
    statusChanged(status) {
      if (args['report-connection'] && connected !== null && status.connected !== connected && !closing) {
        connected = status.connected;
        emit({ event: 'connection', connected });
      }
      if (status.downloadError && !closing) {
        fail('sync status download error', status.downloadError);
      }
      if (reportPriority !== undefined && !priorityReported && status.statusForPriority(reportPriority).hasSynced) {
        priorityReported = true;
        emit({ event: 'priority_synced', priority: reportPriority, has_synced: status.hasSynced === true });
      }
    }
  });

  let token = args.token;
  const connector = {
    async fetchCredentials() {
      return { endpoint: args.endpoint, token };
    },
    async uploadData(database) {
      // The test client makes no local writes; drain anything defensively.
      const batch = await database.getCrudBatch();
      if (batch) await batch.complete();
    }
  };

  const methods = { http: SyncStreamConnectionMethod.HTTP, 'web-socket': SyncStreamConnectionMethod.WEB_SOCKET };
  const connectionMethod = methods[args['connection-method']];
  if (!connectionMethod) {
    fail(`--connection-method ${args['connection-method']}: http or web-socket`);
    return;
  }
  await db.connect(connector, { connectionMethod, checkpointMode: args['checkpoint-mode'] });

  const firstSyncTimeout = AbortSignal.timeout(Number(args['first-sync-timeout-ms']));
  await db.waitForFirstSync(firstSyncTimeout);
  if (failed) return;
  if (firstSyncTimeout.aborted || !db.currentStatus.hasSynced) {
    fail(`first sync did not complete within ${args['first-sync-timeout-ms']} ms: ${db.currentStatus.getMessage()}`);
    return;
  }
  const counts = await countAll(db);
  emit({ event: 'first_sync', ...counts });
  connected = db.currentStatus.connected;
  for (const k of ['lists', 'todos']) {
    if (args[k] !== undefined && Number(args[k]) !== counts[k]) {
      fail(`first sync: ${counts[k]} ${k}, expected ${args[k]}`);
      return;
    }
  }

  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const line of rl) {
    if (failed) return;
    if (!line.trim()) continue;
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (e) {
      fail(`bad command line ${JSON.stringify(line)}`, e);
      return;
    }
    switch (cmd.cmd) {
      case 'wait':
        if (!(await waitFor(db, cmd))) return;
        break;
      case 'query': {
        const rows = await db.getAll(cmd.sql, cmd.params ?? []);
        emit({ event: 'rows', rows });
        break;
      }
      case 'subscribe': {
        // The handle is kept until an unsubscribe command: dropping it
        // would start the subscription's TTL.
        const sub = await db.syncStream(cmd.stream, cmd.params ?? null).subscribe(cmd.ttl ? { ttl: cmd.ttl } : undefined);
        subscriptions.push({ key: JSON.stringify([cmd.stream, cmd.params ?? null]), sub });
        await sub.waitForFirstSync(AbortSignal.timeout(cmd.timeout_ms ?? 60000));
        emit({ event: 'subscribed' });
        break;
      }
      case 'request_checkpoint': {
        const req = await db.requestCheckpoint();
        await req.waitForSync({ signal: AbortSignal.timeout(cmd.timeout_ms ?? 60000) });
        emit({ event: 'checkpoint_synced' });
        break;
      }
      case 'unsubscribe': {
        // The handles of that stream and parameters: their TTL starts.
        const key = JSON.stringify([cmd.stream, cmd.params ?? null]);
        for (const s of subscriptions.filter((s) => s.key === key)) s.sub.unsubscribe();
        emit({ event: 'unsubscribed' });
        break;
      }
      case 'unsubscribe_all':
        await db.syncStream(cmd.stream, cmd.params ?? null).unsubscribeAll();
        emit({ event: 'unsubscribed' });
        break;
      case 'set_token':
        token = cmd.token;
        emit({ event: 'token_set' });
        break;
      case 'exit':
        await shutdown(db);
        return;
      default:
        fail(`unknown command ${JSON.stringify(cmd)}`);
        return;
    }
  }
  await shutdown(db); // stdin closed
}

async function countAll(db) {
  const row = await db.get('SELECT (SELECT count(*) FROM lists) AS lists, (SELECT count(*) FROM todos) AS todos');
  return { lists: Number(row.lists), todos: Number(row.todos) };
}

// waitFor resolves true once the condition in cmd holds (and reports it), or
// reports an error and resolves false on timeout or a sync failure.
async function waitFor(db, cmd) {
  const timeoutMs = cmd.timeout_ms ?? 60000;
  let sql, want;
  if (cmd.sql !== undefined) {
    sql = `SELECT (${cmd.sql}) AS v0`;
    want = [Number(cmd.n)];
  } else {
    const keys = ['lists', 'todos'].filter((k) => cmd[k] !== undefined);
    if (keys.length === 0) {
      fail(`wait needs todos, lists or sql+n: ${JSON.stringify(cmd)}`);
      return false;
    }
    sql = 'SELECT ' + keys.map((k, i) => `(SELECT count(*) FROM ${k}) AS v${i}`).join(', ');
    want = keys.map((k) => Number(cmd[k]));
  }
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), timeoutMs);
  let last = null;
  try {
    for await (const result of db.watch(sql, cmd.params ?? [], { signal: ac.signal, throttleMs: 20 })) {
      const row = result.rows?._array?.[0] ?? result.rows?.item?.(0);
      last = want.map((_, i) => Number(row[`v${i}`]));
      if (failed) return false;
      if (last.every((v, i) => v === want[i])) {
        const out = { event: 'count' };
        if (cmd.sql !== undefined) out.n = last[0];
        else ['lists', 'todos'].filter((k) => cmd[k] !== undefined).forEach((k, i) => (out[k] = last[i]));
        emit(out);
        return true;
      }
    }
  } catch (e) {
    if (!ac.signal.aborted) {
      fail('watch failed', e);
      return false;
    }
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
  if (!failed) {
    fail(
      `wait ${JSON.stringify(cmd)}: timed out after ${timeoutMs} ms with ${JSON.stringify(last)}; ` +
        db.currentStatus.getMessage()
    );
  }
  return false;
}

async function shutdown(db) {
  closing = true;
  try {
    await db.disconnect();
    await db.close();
  } catch (e) {
    process.stderr.write(`close: ${errText(e)}\n`);
  }
  emit({ event: 'bye' });
  process.exit(0);
}
