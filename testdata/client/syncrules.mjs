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
//    "requests": [{"claims": "<JWT payload JSON>", "params": "<client parameters JSON>"}]}
//
// Row values are [column, tag, value] with tag n (NULL), i (INTEGER, value
// decimal text), r (REAL, value as Go's strconv 'g' text, or NaN/+Inf/-Inf),
// t (TEXT) or b (BLOB, value hex). The answer is
//
//   {"errors": [{"level": "fatal"|"warning", "line": N, "message": "..."}],
//    "rows": [{"outputs": [{"bucket", "table", "id", "data"}], "errors": N,
//              "lookups": [{"key", "rows"}], "lookup_errors": N}],
//    "requests": [{"buckets": [{"bucket", "priority"}], "lookups": ["<key>"], "failed": true?}]}
//
// where data, key and rows are the exact strings the service stores and
// hashes (JSONBig.stringify), lines are 1-based in the YAML, and request
// lookups are resolved against the lookup entries of the case's rows (the
// service's parameter storage). Rules with fatal errors are not evaluated.
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
    const res = { buckets: [], lookups: [] };
    try {
      const { querier } = rules.getBucketParameterQuerier({ globalParameters: params, hasDefaultStreams: true, streams: {} });
      const dynamic = await querier.queryDynamicBucketDescriptions({
        getParameterSets: async (lookups) =>
          lookups.map((lookup) => {
            const key = JSONBig.stringify(lookup.values);
            res.lookups.push(key);
            return { lookup, rows: stored.get(key) ?? [] };
          })
      });
      res.buckets = mergeBuckets([...querier.staticBuckets, ...dynamic]).map((b) => ({ bucket: b.bucket, priority: b.priority }));
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
