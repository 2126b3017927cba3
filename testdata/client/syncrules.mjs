// Reference-compiler driver for syncpipe's differential sync-rules test
// (stages/syncrules/reference_test.go).
//
// It reads cases as JSON lines on stdin, evaluates each with PowerSync's own
// compiler (@powersync/service-sync-rules, pinned in package.json) the way
// the PowerSync service does, and writes one JSON line per case to stdout,
// in input order. A case is
//
//   {"rules": "<yaml>",
//    "schema": [{"table": "todos", "columns": ["id", ...]}],   optional
//    "rows": [{"table": "todos", "row": [["id", "t", "a1"], ["n", "i", "5"], ...]}],
//    "requests": [{"claims": "<JWT payload JSON>", "params": "<client parameters JSON>",
//                  "streams": {"include_defaults": true,                optional, default true
//                              "subscriptions": [{"stream": "name",
//                                                 "parameters": {...} | null,
//                                                 "override_priority": 0..3 | null}]}}]}
//
// Row values are [column, tag, value] with tag n (NULL), i (INTEGER, value
// decimal text), r (REAL, value as Go's strconv 'g' text, or NaN/+Inf/-Inf),
// t (TEXT) or b (BLOB, value hex). A request's optional "streams" is the
// sync request's `streams` object (Sync Streams); without it the request
// includes the default (auto_subscribe) streams and subscribes to nothing
// else, as a client that sends none. The answer is
//
//   {"errors": [{"level": "fatal"|"warning", "line": N, "message": "..."}],
//    "rows": [{"outputs": [{"bucket", "table", "id", "data"}], "errors": N,
//              "lookups": [{"key", "rows"}], "lookup_errors": N}],
//    "requests": [{"buckets": [{"bucket", "priority"}], "lookups": ["<key>"],
//                  "stream_errors": [{"stream", "subscription", "message"}]?,
//                  "failed": true?}]}
//
// where data, key and rows are the exact strings the service stores and
// hashes (JSONBig.stringify), lines are 1-based in the YAML, and request
// lookups are resolved against the lookup entries of the case's rows (the
// service's parameter storage). A bucket's priority is the one the service
// sends in its checkpoint line: the merged bucket's priority, replaced by
// the lowest override_priority of the subscriptions that reached it (see
// subscriptionsOf and priorityOf). stream_errors, present only when there are some, are the
// querier's per-subscription errors, which the service reports in the
// checkpoint's streams[].errors while serving the rest; subscription is the
// subscription's index in "subscriptions", or -1 for a stream's default
// (auto_subscribe) subscription. Rules with fatal errors are not evaluated.
import readline from 'node:readline';
import { JSONBig } from '@powersync/service-jsonbig';
import {
  BaseJwtPayload,
  RequestParameters,
  SqlSyncRules,
  StaticSchema,
  mergeBuckets,
  versionedHydrationState
} from '@powersync/service-sync-rules';

const connectionTag = 'default';
const defaultSchema = 'public';

function decodeValue([, tag, v]) {
  switch (tag) {
    case 'n':
      return null;
    case 'i':
      return BigInt(v);
    case 'r':
      if (v === 'NaN') return NaN;
      if (v === '+Inf') return Infinity;
      if (v === '-Inf') return -Infinity;
      return Number(v);
    case 't':
      return v;
    case 'b':
      return Uint8Array.from(Buffer.from(v, 'hex'));
  }
  throw new Error(`unknown value tag ${tag}`);
}

function lineOf(yaml, offset) {
  let line = 1;
  for (let i = 0; i < offset && i < yaml.length; i++) {
    if (yaml.charCodeAt(i) === 10) line++;
  }
  return line;
}

function schemaOf(tables) {
  return new StaticSchema([
    {
      tag: connectionTag,
      schemas: [{ name: defaultSchema, tables: tables.map((t) => ({ name: t.table, columns: t.columns.map((name) => ({ name, sqlite_type: 'text' })) })) }]
    }
  ]);
}

// subscriptionsOf turns a case request's "streams" object into the options
// of getBucketParameterQuerier, built as the PowerSync service builds them
// from a sync request (BucketChecksumState): include_defaults defaults to
// true, and each subscription i joins its stream's list as
// {parameters: parameters ?? {}, opaque_id: i}. Unknown stream names stay in
// the list; the compiler ignores them. No streams object: defaults only.
//
// override_priority is deliberately NOT passed as priorityOverride: the
// service never sets priorityOverride and applies override_priority itself,
// after merging, in translateResolvedBucket (see priorityOf). The two differ
// when a bucket is also reached another way: a priority-0 default plus a
// subscription overriding to 2 is 0 with priorityOverride (mergeBuckets
// takes the minimum) but 2 in the service, whose override replaces it.
function subscriptionsOf(req) {
  if (req == null) return { hasDefaultStreams: true, streams: {}, subscriptions: [] };
  const subscriptions = req.subscriptions ?? [];
  const streams = {};
  subscriptions.forEach((s, i) => {
    const requested = { parameters: s.parameters ?? {}, opaque_id: i };
    if (Object.hasOwn(streams, s.stream)) streams[s.stream].push(requested);
    else streams[s.stream] = [requested];
  });
  return { hasDefaultStreams: req.include_defaults ?? true, streams, subscriptions };
}

// priorityOf is the priority the service sends for a merged bucket: the
// lowest override_priority among the explicit subscriptions that reached it,
// or else the bucket's own priority. Merging keeps the library's
// mergeBuckets (the lowest priority of the streams sharing the bucket), as
// this driver always has; the service's own merge keeps the first entry's
// priority instead, which depends on the order of stream sources and on
// whether a bucket was found statically or through a lookup.
function priorityOf(bucket, subscriptions) {
  let override = null;
  for (const reason of bucket.inclusion_reasons) {
    if (reason === 'default') continue;
    const p = subscriptions[reason.subscription]?.override_priority;
    if (p != null) override = override == null ? p : Math.min(override, p);
  }
  return override ?? bucket.priority;
}

async function evaluate(c) {
  const options = { defaultSchema, throwOnError: false };
  if (c.schema) options.schema = schemaOf(c.schema);
  const { config, errors } = SqlSyncRules.fromYaml(c.rules, options);
  const out = {
    errors: errors.map((e) => ({ level: e.type, line: lineOf(c.rules, e.location?.start ?? 0), message: e.message })),
    rows: [],
    requests: []
  };
  if (errors.some((e) => e.type !== 'warning')) return out;

  const rules = config.hydrate({ hydrationState: versionedHydrationState(1) });
  // Parameter storage: lookup key → the parameter rows stored under it, from
  // every row of the case, in row order.
  const stored = new Map();
  for (const r of c.rows ?? []) {
    const sourceTable = { connectionTag, schema: defaultSchema, name: r.table };
    const record = {};
    for (const col of r.row) record[col[0]] = decodeValue(col);
    const row = rules.applyRowContext(record);
    const data = rules.evaluateRowWithErrors({ sourceTable, record: row });
    const params = rules.evaluateParameterRowWithErrors(sourceTable, row);
    const lookups = params.results.map((p) => ({ key: JSONBig.stringify(p.lookup.values), rows: JSONBig.stringify(p.bucketParameters) }));
    for (const [i, p] of params.results.entries()) {
      const key = lookups[i].key;
      if (!stored.has(key)) stored.set(key, []);
      stored.get(key).push(...p.bucketParameters);
    }
    out.rows.push({
      outputs: data.results.map((o) => ({ bucket: o.bucket, table: o.table, id: o.id, data: JSONBig.stringify(o.data) })),
      errors: data.errors.length,
      lookups,
      lookup_errors: params.errors.length
    });
  }
  for (const q of c.requests ?? []) {
    const payload = JSON.parse(q.claims);
    const params = new RequestParameters(new BaseJwtPayload(payload), JSON.parse(q.params || '{}'));
    const { hasDefaultStreams, streams, subscriptions } = subscriptionsOf(q.streams);
    const res = { buckets: [], lookups: [] };
    try {
      const { querier, errors } = rules.getBucketParameterQuerier({ globalParameters: params, hasDefaultStreams, streams });
      if (errors.length > 0) {
        res.stream_errors = errors.map((e) => ({ stream: e.descriptor, subscription: e.subscription?.opaque_id ?? -1, message: e.message }));
      }
      const dynamic = await querier.queryDynamicBucketDescriptions({
        getParameterSets: async (lookups) =>
          lookups.map((lookup) => {
            const key = JSONBig.stringify(lookup.values);
            res.lookups.push(key);
            return { lookup, rows: stored.get(key) ?? [] };
          })
      });
      res.buckets = mergeBuckets([...querier.staticBuckets, ...dynamic]).map((b) => ({
        bucket: b.bucket,
        priority: priorityOf(b, subscriptions)
      }));
    } catch (e) {
      // A query that throws for this request (e.g. a json_each value that is
      // not a valid parameter) fails the whole request in the service.
      res.failed = true;
    }
    out.requests.push(res);
  }
  return out;
}

const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of rl) {
  if (line.trim() === '') continue;
  let result;
  try {
    result = await evaluate(JSON.parse(line));
  } catch (e) {
    result = { crash: String(e?.stack ?? e) };
  }
  process.stdout.write(JSON.stringify(result) + '\n');
}
