// Reads an rl export with DuckDB (@duckdb/node-api) and prints, as JSON, the column types
// and, per row, what the Go test compares with its own reading of the JSONL export.
// Usage: node duckdb_read.js FILE.parquet
const { DuckDBInstance } = require('@duckdb/node-api');

(async () => {
  const file = process.argv[2].replace(/'/g, "''");
  const db = await DuckDBInstance.create(':memory:');
  const c = await db.connect();
  const types = await c.runAndReadAll(`SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet('${file}'))`);
  const rows = await c.runAndReadAll(`SELECT task_id, repeat, arm, reward, advantage,
      list_filter(reward_components, x -> x.name = 'accuracy')[1].value AS accuracy,
      [m.role FOR m IN messages] AS roles,
      [coalesce(m.content, '') FOR m IN messages] AS contents,
      flatten([[t.function.arguments FOR t IN m.tool_calls] FOR m IN messages]) AS arguments,
      [len(x.generation_token_ids) FOR x IN calls] AS generated,
      flatten([x.generation_token_ids FOR x IN calls]) AS ids,
      flatten([x.generation_log_probs FOR x IN calls]) AS log_probs,
      json_array_length(tools) AS tools
    FROM read_parquet('${file}')`);
  console.log(JSON.stringify({ types: types.getRowObjectsJson(), rows: rows.getRowObjectsJson() }));
})().catch((e) => { console.error(e); process.exit(1); });
