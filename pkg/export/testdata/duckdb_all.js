// Reads a Parquet export with DuckDB (@duckdb/node-api): its column types and every row as
// JSON (DuckDB's to_json of each row), printed as one JSON object.
// Usage: node duckdb_all.js FILE.parquet
const { DuckDBInstance } = require('@duckdb/node-api');

(async () => {
  const file = process.argv[2].replace(/'/g, "''");
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  const types = await c.runAndReadAll(`SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet('${file}'))`);
  const rows = await c.runAndReadAll(`SELECT to_json(t)::VARCHAR AS j FROM read_parquet('${file}') t`);
  console.log(JSON.stringify({ types: types.getRowObjectsJson(), rows: rows.getRowObjectsJson().map((r) => r.j) }));
})().catch((e) => { console.error(e); process.exit(1); });
