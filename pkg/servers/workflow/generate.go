package workflow

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/pkg/plan"
	"github.com/rollout-dev/rollout/pkg/servers/gym"
)

// Generate writes n task rows for the workflow server as JSONL: each asks, in plain
// words, for a data pipeline (a source, zero to two transforms and a sink, each configured with
// values from the request) to be found in a per-task component catalogue, configured, validated,
// assembled and deployed. The same seed gives the same bytes.
//
// Row fields: id ("workflow-0001"…), category (what the sink makes of the data: analytics,
// replication, archival, search_indexing, alerting), difficulty (easy: source → sink, one
// environment; medium: one transform, two environments, a deprecated look-alike of the source;
// hard: two transforms, three environments, deprecated look-alikes of the source, the sink and a
// transform), responses_create_params (the request as the one user message; every workflow
// tool), catalog (what seed_session loads), requirements (the expected pipeline, in order, with
// the values its configurations must have; what verify reads) and reference_plan (a plan that
// solves the task; see package plan).
//
// The tasks need the tools: component ids are opaque and only the discovery tools tell them; the
// credential (connectors) or worker pool (transforms) of the requested environment exists only
// in the enum of the component's config schema; configurations must pass validate_config before
// validate_pipeline accepts the pipeline, and deploy_pipeline needs a validated pipeline.
func Generate(w io.Writer, seed int64, n int) error {
	if n < 0 {
		return fmt.Errorf("workflow: n = %d, want ≥ 0", n)
	}
	r := rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x5eed_f10e_0003))
	bw := bufio.NewWriter(w)
	seen := map[string]bool{}
	for i := range n {
		difficulty := workflowDifficulties[i%len(workflowDifficulties)]
		var row workflowObj
		for attempt := 0; ; attempt++ {
			var text string
			row, text = workflowTask(r, i, difficulty)
			if !seen[text] {
				seen[text] = true
				break
			}
			if attempt == 1000 {
				return fmt.Errorf("workflow: cannot make %d distinct tasks", n)
			}
		}
		bw.Write(gym.MarshalFields(row))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

var workflowDifficulties = []string{"easy", "medium", "hard"}

// workflowObj is a JSON object that keeps its members' order.
type workflowObj []gym.Field

func (o workflowObj) MarshalJSON() ([]byte, error) { return gym.MarshalFields(o), nil }

func workflowRef(ref string, args ...any) workflowObj {
	return workflowObj{{Key: "$ref", Value: fmt.Sprintf(ref, args...)}}
}

// ---- the component templates ----

// workflowTemplate is a kind of component; each task makes its own components of some of them
// (own ids, own credentials and worker pools) and draws the values the request asks for.
type workflowTemplate struct {
	key         string
	kind        string
	name        string
	legacyName  string // the deprecated look-alike's name
	description string
	tags        []string
	category    string // sinks: the task category
	// envProp is the required property whose value is a resource registered in the workspace,
	// one per environment: "credential" (connectors) or "worker_pool" (transforms); envPrefix
	// starts the resources' ids.
	envProp, envPrefix string
	props              []workflowTemplateProp
	// pick draws the task's values; e is the task's entity (orders, payments, …), which names
	// its topics, tables, buckets and indexes.
	pick func(r *rand.Rand, e string) workflowPick
}

type workflowTemplateProp struct {
	name, typ, desc string
	required        bool
	enum            []string
	min, max        int // when max > 0
	pattern         string
	def             any
	items           string // array items' type
}

// workflowPick is what one task asks of a component: the values its configuration must have
// (in schema order, without the credential or worker pool) and the request's words for them.
type workflowPick struct {
	values workflowObj
	phrase string
}

func workflowOne[T any](r *rand.Rand, list []T) T { return list[r.IntN(len(list))] }

func workflowNN(r *rand.Rand) int { return 10 + r.IntN(90) }

var (
	workflowEntities = []string{"orders", "payments", "clickstream", "signups", "shipments", "invoices",
		"sensor_readings", "audit_events", "page_views", "refunds", "inventory", "sessions", "tickets", "subscriptions"}
	workflowCompanies = []string{"acme", "globex", "initech", "umbrella", "hooli", "vandelay", "stark", "wayne", "wonka", "tyrell"}
	workflowSchemas   = []string{"public", "sales", "billing", "ops", "crm"}
	workflowFormats   = map[string]string{"csv": "CSV", "json": "JSON", "parquet": "Parquet"}
)

func workflowDash(s string) string { return strings.ReplaceAll(s, "_", "-") }

var workflowTemplates = []workflowTemplate{
	// sources
	{
		key: "kafka", kind: "source", name: "Kafka Stream Source", legacyName: "Kafka Consumer (v1)",
		description: "Consumes records from a Kafka topic as a consumer group.",
		tags:        []string{"kafka", "streaming", "events"}, envProp: "credential", envPrefix: "kafka",
		props: []workflowTemplateProp{
			{name: "topic", typ: "string", desc: "Kafka topic to consume.", required: true},
			{name: "consumer_group", typ: "string", desc: "Consumer group id.", required: true},
			{name: "start_offset", typ: "string", desc: "Where a new consumer group starts reading.", required: true, enum: []string{"earliest", "latest"}},
			{name: "max_batch_size", typ: "integer", desc: "Records per batch.", min: 1, max: 10000, def: 500},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			topic := e + workflowOne(r, []string{"", ".v2", ".events", "-raw"})
			group := fmt.Sprintf("etl-%s-%d", workflowDash(e), workflowNN(r))
			offset := workflowOne(r, []string{"earliest", "latest"})
			words := map[string]string{"earliest": "the earliest offset", "latest": "the latest offset (new events only)"}[offset]
			return workflowPick{
				values: workflowObj{{Key: "topic", Value: topic}, {Key: "consumer_group", Value: group}, {Key: "start_offset", Value: offset}},
				phrase: fmt.Sprintf("reads the Kafka topic `%s` as consumer group `%s`, starting from %s", topic, group, words),
			}
		},
	},
	{
		key: "pgcdc", kind: "source", name: "PostgreSQL CDC Source", legacyName: "Postgres Logical Replicator (v1)",
		description: "Streams row changes of a PostgreSQL table through logical replication.",
		tags:        []string{"postgres", "postgresql", "cdc", "database"}, envProp: "credential", envPrefix: "pgcdc",
		props: []workflowTemplateProp{
			{name: "table", typ: "string", desc: "Table to capture, as schema.table.", required: true, pattern: `^[a-z_]+\.[a-z_]+$`},
			{name: "slot_name", typ: "string", desc: "Logical replication slot.", required: true, pattern: `^[a-z0-9_]+$`},
			{name: "snapshot_mode", typ: "string", desc: "Whether to snapshot the table before streaming changes.", required: true, enum: []string{"initial", "never"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			table := workflowOne(r, workflowSchemas) + "." + e
			slot := fmt.Sprintf("cdc_%s_%d", e, workflowNN(r))
			mode := workflowOne(r, []string{"initial", "never"})
			words := map[string]string{"initial": "taking an initial snapshot first", "never": "without an initial snapshot"}[mode]
			return workflowPick{
				values: workflowObj{{Key: "table", Value: table}, {Key: "slot_name", Value: slot}, {Key: "snapshot_mode", Value: mode}},
				phrase: fmt.Sprintf("captures the changes of the PostgreSQL table `%s` through the replication slot `%s`, %s", table, slot, words),
			}
		},
	},
	{
		key: "s3src", kind: "source", name: "S3 Object Source", legacyName: "S3 Poller (legacy)",
		description: "Reads files from an S3 bucket prefix.",
		tags:        []string{"s3", "aws", "files", "batch"}, envProp: "credential", envPrefix: "aws",
		props: []workflowTemplateProp{
			{name: "bucket", typ: "string", desc: "S3 bucket.", required: true},
			{name: "prefix", typ: "string", desc: "Key prefix to read under.", required: true},
			{name: "format", typ: "string", desc: "File format.", required: true, enum: []string{"csv", "json", "parquet"}},
			{name: "recursive", typ: "boolean", desc: "Also read sub-prefixes.", def: true},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			bucket := fmt.Sprintf("%s-landing-%d", workflowOne(r, workflowCompanies), workflowNN(r))
			prefix := workflowDash(e) + "/incoming/"
			format := workflowOne(r, []string{"csv", "json", "parquet"})
			return workflowPick{
				values: workflowObj{{Key: "bucket", Value: bucket}, {Key: "prefix", Value: prefix}, {Key: "format", Value: format}},
				phrase: fmt.Sprintf("reads the %s files under the prefix `%s` of the S3 bucket `%s`", workflowFormats[format], prefix, bucket),
			}
		},
	},
	{
		key: "webhook", kind: "source", name: "HTTP Webhook Source", legacyName: "Webhook Listener (v1)",
		description: "Receives events posted to an HTTP endpoint.",
		tags:        []string{"http", "webhook", "events"}, envProp: "credential", envPrefix: "webhook",
		props: []workflowTemplateProp{
			{name: "path", typ: "string", desc: "Endpoint path.", required: true, pattern: `^/[a-z0-9/_-]+$`},
			{name: "auth_mode", typ: "string", desc: "How senders authenticate.", required: true, enum: []string{"hmac", "bearer"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			path := fmt.Sprintf("/hooks/%s-%d", workflowDash(e), workflowNN(r))
			mode := workflowOne(r, []string{"hmac", "bearer"})
			words := map[string]string{"hmac": "checking HMAC signatures", "bearer": "checking a bearer token"}[mode]
			return workflowPick{
				values: workflowObj{{Key: "path", Value: path}, {Key: "auth_mode", Value: mode}},
				phrase: fmt.Sprintf("receives events on the webhook path `%s`, %s", path, words),
			}
		},
	},
	{
		key: "pubsub", kind: "source", name: "Google Pub/Sub Source", legacyName: "Pub/Sub Puller (deprecated)",
		description: "Pulls messages from a Google Cloud Pub/Sub subscription.",
		tags:        []string{"pubsub", "gcp", "google", "streaming"}, envProp: "credential", envPrefix: "gcp",
		props: []workflowTemplateProp{
			{name: "subscription", typ: "string", desc: "Subscription to pull from.", required: true},
			{name: "ack_deadline_seconds", typ: "integer", desc: "Acknowledgement deadline.", min: 10, max: 600, def: 60},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			sub := fmt.Sprintf("%s-sub-%d", workflowDash(e), workflowNN(r))
			return workflowPick{
				values: workflowObj{{Key: "subscription", Value: sub}},
				phrase: fmt.Sprintf("pulls the messages of the Pub/Sub subscription `%s`", sub),
			}
		},
	},
	// transforms
	{
		key: "filter", kind: "transform", name: "Row Filter", legacyName: "Record Filter (classic)",
		description: "Keeps only the records whose field satisfies a condition.",
		tags:        []string{"filter", "where", "condition"}, envProp: "worker_pool", envPrefix: "pool",
		props: []workflowTemplateProp{
			{name: "field", typ: "string", desc: "Field to test.", required: true},
			{name: "operator", typ: "string", desc: "Comparison.", required: true, enum: []string{"eq", "ne", "gt", "lt", "contains"}},
			{name: "value", typ: "string", desc: "Value to compare with.", required: true},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			type cond struct {
				field  string
				ops    []string
				values []string
			}
			c := workflowOne(r, []cond{
				{"status", []string{"eq", "ne"}, []string{"paid", "failed", "shipped", "cancelled"}},
				{"country", []string{"eq", "ne"}, []string{"DE", "FR", "US", "JP", "BR"}},
				{"plan", []string{"eq", "ne"}, []string{"pro", "free", "enterprise"}},
				{"channel", []string{"eq", "ne"}, []string{"web", "ios", "android"}},
				{"amount", []string{"gt", "lt"}, []string{"100", "250", "1000"}},
				{"quantity", []string{"gt", "lt"}, []string{"5", "10", "50"}},
				{"user_agent", []string{"contains"}, []string{"Mobile", "bot", "Firefox"}},
				{"email", []string{"contains"}, []string{"@example.com", "@acme.io"}},
			})
			op, value := workflowOne(r, c.ops), workflowOne(r, c.values)
			words := map[string]string{"eq": "equals", "ne": "is not", "gt": "is greater than", "lt": "is less than", "contains": "contains"}[op]
			return workflowPick{
				values: workflowObj{{Key: "field", Value: c.field}, {Key: "operator", Value: op}, {Key: "value", Value: value}},
				phrase: fmt.Sprintf("keeps only the records whose `%s` %s `%s`", c.field, words, value),
			}
		},
	},
	{
		key: "aggregate", kind: "transform", name: "Windowed Aggregator", legacyName: "Batch Aggregator (v1)",
		description: "Aggregates records per group over tumbling time windows.",
		tags:        []string{"aggregate", "window", "group", "count", "sum"}, envProp: "worker_pool", envPrefix: "pool",
		props: []workflowTemplateProp{
			{name: "window", typ: "string", desc: "Window length.", required: true, enum: []string{"1m", "5m", "15m", "1h", "1d"}},
			{name: "group_by", typ: "string", desc: "Field to group by.", required: true},
			{name: "function", typ: "string", desc: "Aggregate function.", required: true, enum: []string{"count", "sum", "avg", "min", "max"}},
			{name: "value_field", typ: "string", desc: "Field to aggregate (not for count)."},
			{name: "emit_empty_windows", typ: "boolean", desc: "Emit windows without records.", def: false},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			window := workflowOne(r, []string{"1m", "5m", "15m", "1h", "1d"})
			windowWords := map[string]string{"1m": "one-minute", "5m": "five-minute", "15m": "15-minute", "1h": "hourly", "1d": "daily"}[window]
			group := workflowOne(r, []string{"region", "country", "customer_id", "product_id", "store_id", "channel"})
			fn := workflowOne(r, []string{"count", "sum", "avg", "min", "max"})
			if fn == "count" {
				return workflowPick{
					values: workflowObj{{Key: "window", Value: window}, {Key: "group_by", Value: group}, {Key: "function", Value: fn}},
					phrase: fmt.Sprintf("counts the records per `%s` in %s windows", group, windowWords),
				}
			}
			value := workflowOne(r, []string{"amount", "quantity", "duration_ms", "price"})
			fnWords := map[string]string{"sum": "sum", "avg": "average", "min": "minimum", "max": "maximum"}[fn]
			return workflowPick{
				values: workflowObj{{Key: "window", Value: window}, {Key: "group_by", Value: group}, {Key: "function", Value: fn}, {Key: "value_field", Value: value}},
				phrase: fmt.Sprintf("computes the %s of `%s` per `%s` in %s windows", fnWords, value, group, windowWords),
			}
		},
	},
	{
		key: "mask", kind: "transform", name: "PII Masker", legacyName: "PII Scrubber (deprecated)",
		description: "Masks personal data in the listed fields.",
		tags:        []string{"pii", "privacy", "mask", "gdpr"}, envProp: "worker_pool", envPrefix: "pool",
		props: []workflowTemplateProp{
			{name: "fields", typ: "array", items: "string", desc: "Fields to mask.", required: true},
			{name: "method", typ: "string", desc: "Masking method.", required: true, enum: []string{"hash", "redact", "tokenize"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			all := []string{"email", "phone", "ssn", "ip_address", "card_number", "full_name"}
			i := r.IntN(len(all))
			j := (i + 1 + r.IntN(len(all)-1)) % len(all)
			method := workflowOne(r, []string{"hash", "redact", "tokenize"})
			words := map[string]string{"hash": "hashing", "redact": "redacting", "tokenize": "tokenizing"}[method]
			return workflowPick{
				values: workflowObj{{Key: "fields", Value: []string{all[i], all[j]}}, {Key: "method", Value: method}},
				phrase: fmt.Sprintf("masks the `%s` and `%s` fields by %s them", all[i], all[j], words),
			}
		},
	},
	{
		key: "dedupe", kind: "transform", name: "Deduplicator", legacyName: "Duplicate Remover (v1)",
		description: "Drops records whose key was already seen within a time window.",
		tags:        []string{"dedupe", "deduplicate", "duplicates"}, envProp: "worker_pool", envPrefix: "pool",
		props: []workflowTemplateProp{
			{name: "key_field", typ: "string", desc: "Field that identifies a record.", required: true},
			{name: "window", typ: "string", desc: "How long a key is remembered.", required: true, enum: []string{"5m", "1h", "1d"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			key := workflowOne(r, []string{"event_id", "order_id", "message_id", "request_id"})
			window := workflowOne(r, []string{"5m", "1h", "1d"})
			words := map[string]string{"5m": "five-minute", "1h": "one-hour", "1d": "one-day"}[window]
			return workflowPick{
				values: workflowObj{{Key: "key_field", Value: key}, {Key: "window", Value: window}},
				phrase: fmt.Sprintf("drops duplicate records with the same `%s` within a %s window", key, words),
			}
		},
	},
	{
		key: "geoip", kind: "transform", name: "Geo-IP Enricher", legacyName: "IP Locator (legacy)",
		description: "Adds the location of an IP address field to each record.",
		tags:        []string{"geoip", "enrich", "location", "ip"}, envProp: "worker_pool", envPrefix: "pool",
		props: []workflowTemplateProp{
			{name: "ip_field", typ: "string", desc: "Field holding the IP address.", required: true},
			{name: "target_field", typ: "string", desc: "Field to write the location to.", required: true},
			{name: "precision", typ: "string", desc: "Location precision.", enum: []string{"country", "city"}, def: "city"},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			ip := workflowOne(r, []string{"client_ip", "ip_address", "remote_addr"})
			target := workflowOne(r, []string{"geo", "location", "geoip"})
			precision := workflowOne(r, []string{"country", "city"})
			return workflowPick{
				values: workflowObj{{Key: "ip_field", Value: ip}, {Key: "target_field", Value: target}, {Key: "precision", Value: precision}},
				phrase: fmt.Sprintf("adds the %s-level location of `%s` to the field `%s`", precision, ip, target),
			}
		},
	},
	// sinks
	{
		key: "snowflake", kind: "sink", name: "Snowflake Table Sink", legacyName: "Snowflake Loader (v1)",
		description: "Loads records into a Snowflake table.", category: "analytics",
		tags: []string{"snowflake", "warehouse", "analytics"}, envProp: "credential", envPrefix: "snowflake",
		props: []workflowTemplateProp{
			{name: "database", typ: "string", desc: "Database.", required: true},
			{name: "table", typ: "string", desc: "Table.", required: true},
			{name: "write_mode", typ: "string", desc: "How rows are written.", required: true, enum: []string{"append", "overwrite", "merge"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			db := workflowOne(r, []string{"ANALYTICS", "REPORTING", "FINANCE", "MARKETING", "PRODUCT"})
			table := strings.ToUpper(e) + workflowOne(r, []string{"_DAILY", "_CLEAN", "_HOURLY", "_SUMMARY"})
			mode := workflowOne(r, []string{"append", "overwrite", "merge"})
			return workflowPick{
				values: workflowObj{{Key: "database", Value: db}, {Key: "table", Value: table}, {Key: "write_mode", Value: mode}},
				phrase: fmt.Sprintf("loads the result into the Snowflake table `%s` of the database `%s` in %s mode", table, db, mode),
			}
		},
	},
	{
		key: "pgsink", kind: "sink", name: "PostgreSQL Table Sink", legacyName: "Postgres Writer (legacy)",
		description: "Writes records into a PostgreSQL table.", category: "replication",
		tags: []string{"postgres", "postgresql", "database"}, envProp: "credential", envPrefix: "pg",
		props: []workflowTemplateProp{
			{name: "table", typ: "string", desc: "Target table, as schema.table.", required: true, pattern: `^[a-z_]+\.[a-z_]+$`},
			{name: "write_mode", typ: "string", desc: "How rows are written.", required: true, enum: []string{"insert", "upsert"}},
			{name: "batch_size", typ: "integer", desc: "Rows per transaction.", min: 1, max: 5000, def: 1000},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			table := workflowOne(r, workflowSchemas) + "." + e + workflowOne(r, []string{"_copy", "_replica", "_mirror"})
			mode := workflowOne(r, []string{"insert", "upsert"})
			words := map[string]string{"insert": "inserting new rows", "upsert": "upserting rows"}[mode]
			return workflowPick{
				values: workflowObj{{Key: "table", Value: table}, {Key: "write_mode", Value: mode}},
				phrase: fmt.Sprintf("writes the result to the PostgreSQL table `%s`, %s", table, words),
			}
		},
	},
	{
		key: "s3sink", kind: "sink", name: "S3 Archive Sink", legacyName: "S3 Dumper (v1)",
		description: "Writes records as files to an S3 bucket prefix.", category: "archival",
		tags: []string{"s3", "aws", "archive", "files"}, envProp: "credential", envPrefix: "aws",
		props: []workflowTemplateProp{
			{name: "bucket", typ: "string", desc: "S3 bucket.", required: true},
			{name: "prefix", typ: "string", desc: "Key prefix to write under.", required: true},
			{name: "format", typ: "string", desc: "File format.", required: true, enum: []string{"json", "parquet", "csv"}},
			{name: "compression", typ: "string", desc: "File compression.", required: true, enum: []string{"none", "gzip", "zstd"}},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			bucket := fmt.Sprintf("%s-archive-%d", workflowOne(r, workflowCompanies), workflowNN(r))
			prefix := fmt.Sprintf("%s/%d/", workflowDash(e), 2020+r.IntN(7))
			format := workflowOne(r, []string{"json", "parquet", "csv"})
			comp := workflowOne(r, []string{"none", "gzip", "zstd"})
			words := map[string]string{"none": "uncompressed", "gzip": "gzip-compressed", "zstd": "zstd-compressed"}[comp]
			return workflowPick{
				values: workflowObj{{Key: "bucket", Value: bucket}, {Key: "prefix", Value: prefix}, {Key: "format", Value: format}, {Key: "compression", Value: comp}},
				phrase: fmt.Sprintf("archives the result as %s %s files under the prefix `%s` of the S3 bucket `%s`", words, workflowFormats[format], prefix, bucket),
			}
		},
	},
	{
		key: "elastic", kind: "sink", name: "Elasticsearch Index Sink", legacyName: "Elastic Bulk Loader (v1)",
		description: "Indexes records as documents of an Elasticsearch index.", category: "search_indexing",
		tags: []string{"elasticsearch", "search", "index"}, envProp: "credential", envPrefix: "elastic",
		props: []workflowTemplateProp{
			{name: "index", typ: "string", desc: "Index name.", required: true, pattern: `^[a-z0-9._-]+$`},
			{name: "id_field", typ: "string", desc: "Field used as the document id.", required: true},
			{name: "refresh", typ: "boolean", desc: "Refresh the index after each batch.", def: false},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			index := fmt.Sprintf("%s-v%d", workflowDash(e), 1+r.IntN(9))
			id := workflowOne(r, []string{"id", "event_id", "order_id", "uuid"})
			return workflowPick{
				values: workflowObj{{Key: "index", Value: index}, {Key: "id_field", Value: id}},
				phrase: fmt.Sprintf("indexes the result into the Elasticsearch index `%s`, using `%s` as the document id", index, id),
			}
		},
	},
	{
		key: "slack", kind: "sink", name: "Slack Alert Sink", legacyName: "Slack Notifier (legacy)",
		description: "Posts each record as an alert message to a Slack channel.", category: "alerting",
		tags: []string{"slack", "alert", "notification", "chat"}, envProp: "credential", envPrefix: "slack",
		props: []workflowTemplateProp{
			{name: "channel", typ: "string", desc: "Channel, starting with #.", required: true, pattern: `^#[a-z0-9_-]+$`},
			{name: "mention", typ: "string", desc: "Who to mention in each alert.", required: true, enum: []string{"none", "here", "channel"}},
			{name: "max_alerts_per_hour", typ: "integer", desc: "Rate limit.", min: 1, max: 1000, def: 60},
		},
		pick: func(r *rand.Rand, e string) workflowPick {
			channel := fmt.Sprintf("#%s-alerts-%d", workflowOne(r, []string{"ops", "payments", "growth", "sre", "data", "support"}), workflowNN(r))
			mention := workflowOne(r, []string{"none", "here", "channel"})
			words := map[string]string{"none": "without mentioning anyone", "here": "mentioning @here", "channel": "mentioning @channel"}[mention]
			return workflowPick{
				values: workflowObj{{Key: "channel", Value: channel}, {Key: "mention", Value: mention}},
				phrase: fmt.Sprintf("posts every result as an alert to the Slack channel `%s`, %s", channel, words),
			}
		},
	},
}

// workflowTransformOrder is the order transforms take in a pipeline: records are filtered,
// deduplicated, masked and enriched before they are aggregated.
var workflowTransformOrder = map[string]int{"filter": 0, "dedupe": 1, "mask": 2, "geoip": 3, "aggregate": 4}

func workflowTemplatesOf(kind string) []*workflowTemplate {
	var out []*workflowTemplate
	for i := range workflowTemplates {
		if workflowTemplates[i].kind == kind {
			out = append(out, &workflowTemplates[i])
		}
	}
	return out
}

// workflowEnvs are the environments credentials and worker pools are registered for, and the
// request's words for them.
var workflowEnvs = []struct{ id, words string }{{"prod", "production"}, {"staging", "staging"}, {"dev", "development"}}

var workflowEnvPropDescriptions = map[string]string{
	"credential":  "Credential registered for this connector in your workspace; its id names its environment (prod, staging, dev).",
	"worker_pool": "Worker pool registered in your workspace to run this transform; its id names its environment (prod, staging, dev).",
}

// workflowSchemaOf is a component's config schema: the template's properties, then its
// environment resource (credential or worker_pool), whose enum is what the workspace registered.
func workflowSchemaOf(t *workflowTemplate, creds []string) workflowObj {
	props := workflowObj{}
	required := []string{}
	for _, p := range t.props {
		s := workflowObj{{Key: "type", Value: p.typ}, {Key: "description", Value: p.desc}}
		if p.items != "" {
			s = append(s, gym.Field{Key: "items", Value: workflowObj{{Key: "type", Value: p.items}}}, gym.Field{Key: "minItems", Value: 1})
		}
		if len(p.enum) > 0 {
			s = append(s, gym.Field{Key: "enum", Value: p.enum})
		}
		if p.max > 0 {
			s = append(s, gym.Field{Key: "minimum", Value: p.min}, gym.Field{Key: "maximum", Value: p.max})
		}
		if p.pattern != "" {
			s = append(s, gym.Field{Key: "pattern", Value: p.pattern})
		}
		if p.def != nil {
			s = append(s, gym.Field{Key: "default", Value: p.def})
		}
		props = append(props, gym.Field{Key: p.name, Value: s})
		if p.required {
			required = append(required, p.name)
		}
	}
	if t.envProp != "" {
		props = append(props, gym.Field{Key: t.envProp, Value: workflowObj{
			{Key: "type", Value: "string"},
			{Key: "description", Value: workflowEnvPropDescriptions[t.envProp]},
			{Key: "enum", Value: creds},
		}})
		required = append(required, t.envProp)
	}
	return workflowObj{{Key: "type", Value: "object"}, {Key: "properties", Value: props}, {Key: "required", Value: required}}
}

// ---- one task ----

type workflowBuilt struct {
	t          *workflowTemplate
	id         string
	creds      []string // the registered credentials or worker pools, in the schema's enum order
	cred       string   // the one to use ("" for components without)
	deprecated bool
}

var workflowOpeners = []string{
	"We need a new data pipeline.",
	"Please build a data pipeline for the data team.",
	"Hi! Could you set up a pipeline for us?",
	"I need a new pipeline in our integration workspace.",
	"New request from analytics: a data pipeline.",
	"Can you put together a pipeline for me?",
}

var workflowClosers = []string{
	"Find the components in the catalogue, configure and validate each one, then assemble, validate and deploy the pipeline, and tell me its pipeline id and deployment id.",
	"Use the catalogue tools: discover the components, validate their configurations, then assemble, validate and deploy the pipeline. Reply with the pipeline and deployment ids.",
	"Look the components up in the catalogue (no deprecated ones), get every configuration validated, then assemble, validate and deploy the pipeline and report the ids.",
}

func workflowTask(r *rand.Rand, index int, difficulty string) (workflowObj, string) {
	nTransforms, nCreds, nDistractors := 0, 1, 4
	switch difficulty {
	case "medium":
		nTransforms, nCreds = 1, 2
	case "hard":
		nTransforms, nCreds, nDistractors = 2, 3, 3
	}
	envs := workflowEnvs[:nCreds]
	env := envs[r.IntN(len(envs))]

	// the pipeline's templates, in order
	chain := []*workflowTemplate{workflowOne(r, workflowTemplatesOf("source"))}
	transforms := workflowTemplatesOf("transform")
	r.Shuffle(len(transforms), func(i, j int) { transforms[i], transforms[j] = transforms[j], transforms[i] })
	chosen := transforms[:nTransforms]
	slices.SortFunc(chosen, func(a, b *workflowTemplate) int { return workflowTransformOrder[a.key] - workflowTransformOrder[b.key] })
	chain = append(chain, chosen...)
	chain = append(chain, workflowOne(r, workflowTemplatesOf("sink")))

	ids := map[string]bool{}
	newID := func() string {
		for {
			id := fmt.Sprintf("cmp-%06x", r.Uint32()&0xffffff)
			if !ids[id] {
				ids[id] = true
				return id
			}
		}
	}
	build := func(t *workflowTemplate, deprecated bool) *workflowBuilt {
		b := &workflowBuilt{t: t, id: newID(), deprecated: deprecated}
		if t.envProp != "" {
			for _, e := range envs {
				b.creds = append(b.creds, fmt.Sprintf("%s-%s-%04d", t.envPrefix, e.id, r.IntN(10000)))
			}
			b.cred = b.creds[0]
			for i, e := range envs {
				if e.id == env.id {
					b.cred = b.creds[i]
				}
			}
			r.Shuffle(len(b.creds), func(i, j int) { b.creds[i], b.creds[j] = b.creds[j], b.creds[i] })
		}
		return b
	}

	var needed, catalog []*workflowBuilt
	for _, t := range chain {
		b := build(t, false)
		needed = append(needed, b)
		catalog = append(catalog, b)
	}
	// deprecated look-alikes
	switch difficulty {
	case "medium":
		catalog = append(catalog, build(chain[0], true))
	case "hard":
		catalog = append(catalog, build(chain[0], true), build(chain[len(chain)-1], true), build(chain[1+r.IntN(nTransforms)], true))
	}
	// distractors: other templates
	var others []*workflowTemplate
	for i := range workflowTemplates {
		t := &workflowTemplates[i]
		used := false
		for _, c := range chain {
			used = used || c == t
		}
		if !used {
			others = append(others, t)
		}
	}
	r.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	for _, t := range others[:nDistractors] {
		catalog = append(catalog, build(t, false))
	}
	r.Shuffle(len(catalog), func(i, j int) { catalog[i], catalog[j] = catalog[j], catalog[i] })

	// the request
	picks := make([]workflowPick, len(chain))
	phrases := make([]string, len(chain))
	entity := workflowOne(r, workflowEntities)
	for i, t := range chain {
		picks[i] = t.pick(r, entity)
		phrases[i] = picks[i].phrase
	}
	var body string
	switch len(phrases) {
	case 2:
		body = "The pipeline " + phrases[0] + ", and " + phrases[1] + "."
	default:
		body = "The pipeline " + strings.Join(phrases[:len(phrases)-1], ", then ") + ", and finally " + phrases[len(phrases)-1] + "."
	}
	parts := []string{workflowOne(r, workflowOpeners), body}
	if nCreds > 1 {
		parts = append(parts, "Use the "+env.words+" environment: its credentials for the connectors and its worker pool for the transforms.")
	}
	parts = append(parts, workflowOne(r, workflowClosers))
	text := strings.Join(parts, " ")

	// the catalogue
	catalogJSON := make([]workflowObj, len(catalog))
	for i, b := range catalog {
		name, desc, version := b.t.name, b.t.description, fmt.Sprintf("%d.%d.%d", 2+r.IntN(3), r.IntN(10), r.IntN(10))
		c := workflowObj{{Key: "component_id", Value: b.id}}
		if b.deprecated {
			name, desc, version = b.t.legacyName, "Deprecated: superseded by "+b.t.name+". "+b.t.description, fmt.Sprintf("1.%d.%d", r.IntN(10), r.IntN(10))
		}
		c = append(c, gym.Field{Key: "name", Value: name}, gym.Field{Key: "kind", Value: b.t.kind}, gym.Field{Key: "description", Value: desc},
			gym.Field{Key: "tags", Value: b.t.tags}, gym.Field{Key: "version", Value: version}, gym.Field{Key: "deprecated", Value: b.deprecated})
		if b.deprecated {
			c = append(c, gym.Field{Key: "superseded_by", Value: b.t.name})
		}
		c = append(c, gym.Field{Key: "config_schema", Value: workflowSchemaOf(b.t, b.creds)})
		catalogJSON[i] = c
	}

	// the requirements
	reqs := make([]workflowObj, len(needed))
	for i, b := range needed {
		config := append(workflowObj{}, picks[i].values...)
		if b.cred != "" {
			config = append(config, gym.Field{Key: b.t.envProp, Value: b.cred})
		}
		reqs[i] = workflowObj{{Key: "component_id", Value: b.id}, {Key: "kind", Value: b.t.kind}, {Key: "name", Value: b.t.name}, {Key: "config", Value: config}}
	}

	// the plan
	var rounds [][]workflowObj
	call := 0
	add := func(round []workflowObj) int {
		first := call
		rounds = append(rounds, round)
		call += len(round)
		return first
	}
	round := []workflowObj{}
	for _, b := range needed {
		round = append(round, workflowObj{{Key: "name", Value: "search_components"}, {Key: "arguments", Value: workflowObj{{Key: "query", Value: b.t.name}}}})
	}
	search := add(round)
	idRef := func(i int) workflowObj { return workflowRef("%d/results/0/component_id", search+i) }
	if difficulty == "hard" {
		round = nil
		for i := range needed {
			round = append(round, workflowObj{{Key: "name", Value: "get_component_info"}, {Key: "arguments", Value: workflowObj{{Key: "component_id", Value: idRef(i)}}}, {Key: "optional", Value: true}})
		}
		add(round)
	}
	round = nil
	for i := range needed {
		round = append(round, workflowObj{{Key: "name", Value: "get_config_schema"}, {Key: "arguments", Value: workflowObj{{Key: "component_id", Value: idRef(i)}}}})
	}
	schemas := add(round)
	round = nil
	for i, b := range needed {
		config := append(workflowObj{}, picks[i].values...)
		if b.cred != "" {
			k := 0
			for j, c := range b.creds {
				if c == b.cred {
					k = j
				}
			}
			config = append(config, gym.Field{Key: b.t.envProp, Value: workflowRef("%d/config_schema/properties/%s/enum/%d", schemas+i, b.t.envProp, k)})
		}
		round = append(round, workflowObj{{Key: "name", Value: "validate_config"}, {Key: "arguments", Value: workflowObj{{Key: "component_id", Value: idRef(i)}, {Key: "config", Value: config}}}})
	}
	validated := add(round)
	stages := make([]workflowObj, len(needed))
	for i := range needed {
		stages[i] = workflowObj{{Key: "component_id", Value: idRef(i)}, {Key: "config", Value: workflowRef("%d/normalized_config", validated+i)}}
	}
	assemble := add([]workflowObj{{{Key: "name", Value: "assemble_pipeline"}, {Key: "arguments", Value: workflowObj{{Key: "components", Value: stages}}}}})
	add([]workflowObj{{{Key: "name", Value: "validate_pipeline"}, {Key: "arguments", Value: workflowObj{{Key: "pipeline_id", Value: workflowRef("%d/pipeline_id", assemble)}}}}})
	deploy := add([]workflowObj{{{Key: "name", Value: "deploy_pipeline"}, {Key: "arguments", Value: workflowObj{{Key: "pipeline_id", Value: workflowRef("%d/pipeline_id", assemble)}}}}})
	final := workflowObj{
		{Key: "pipeline_id", Value: workflowRef("%d/pipeline_id", deploy)},
		{Key: "deployment_id", Value: workflowRef("%d/deployment_id", deploy)},
		{Key: "status", Value: workflowRef("%d/status", deploy)},
	}

	row := workflowObj{
		{Key: "id", Value: fmt.Sprintf("workflow-%04d", index+1)},
		{Key: "category", Value: chain[len(chain)-1].category},
		{Key: "difficulty", Value: difficulty},
		{Key: "responses_create_params", Value: workflowObj{
			{Key: "input", Value: []workflowObj{{{Key: "role", Value: "user"}, {Key: "content", Value: text}}}},
			{Key: "tools", Value: workflowToolsJSON},
		}},
		{Key: "catalog", Value: catalogJSON},
		{Key: "requirements", Value: workflowObj{{Key: "components", Value: reqs}}},
		{Key: "reference_plan", Value: workflowObj{{Key: "rounds", Value: rounds}, {Key: "final", Value: final}}},
		{Key: "agent_ref", Value: workflowObj{{Key: "type", Value: "responses_api_agents"}, {Key: "name", Value: "workflow"}}},
	}
	return row, text
}

// ---- tools and steps ----

// workflowTools are the server's tools as flat Responses-style function tools, in step order.
var workflowTools = []struct {
	name, description, parameters string
}{
	{"search_components",
		"Discovery: search the component catalogue by keywords (technology, capability or name). Returns up to 5 matches, best first, each with component_id, name, kind, deprecated and a summary.",
		`{"type":"object","properties":{"query":{"type":"string","description":"Keywords, e.g. kafka, dedupe, or a component's name."}},"required":["query"],"additionalProperties":false}`},
	{"list_components",
		"Discovery: list the catalogue's components, optionally only those of one kind. Returns component_id, name, kind, deprecated and a summary of each.",
		`{"type":"object","properties":{"kind":{"type":"string","enum":["source","transform","sink"],"description":"Only components of this kind; omit for all."}},"additionalProperties":false}`},
	{"get_component_info",
		"Discovery: details of one component: description, tags, version, whether it is deprecated (and what supersedes it), whether it needs a credential or a worker pool.",
		`{"type":"object","properties":{"component_id":{"type":"string","description":"A component_id from search_components or list_components."}},"required":["component_id"],"additionalProperties":false}`},
	{"get_config_schema",
		"Configuration: the JSON Schema of a component's configuration: its properties with types, allowed values (enum), limits and defaults, and which are required. The credentials and worker pools registered in your workspace are the enum of the credential / worker_pool property.",
		`{"type":"object","properties":{"component_id":{"type":"string","description":"The component's id."}},"required":["component_id"],"additionalProperties":false}`},
	{"validate_config",
		"Configuration: validate a component's configuration. Returns {valid, errors: [{property, message}], warnings, normalized_config}; normalized_config (defaults filled in) is what to assemble with. A configuration must pass here before a pipeline using it can pass validate_pipeline.",
		`{"type":"object","properties":{"component_id":{"type":"string","description":"The component's id."},"config":{"type":"object","description":"The configuration: property name to value, as get_config_schema describes it."}},"required":["component_id","config"],"additionalProperties":false}`},
	{"assemble_pipeline",
		"Assembly: assemble a pipeline from components in order (a source first, then any transforms, a sink last), each with its validated configuration. Returns the new pipeline_id.",
		`{"type":"object","properties":{"components":{"type":"array","minItems":1,"description":"The pipeline's components in order.","items":{"type":"object","properties":{"component_id":{"type":"string"},"config":{"type":"object"}},"required":["component_id","config"]}}},"required":["components"],"additionalProperties":false}`},
	{"validate_pipeline",
		"Assembly: validate an assembled pipeline: components exist and are not deprecated, source first and sink last, every configuration valid and passed by validate_config. Returns {valid, errors: [{property, message}]}.",
		`{"type":"object","properties":{"pipeline_id":{"type":"string","description":"The pipeline_id from assemble_pipeline."}},"required":["pipeline_id"],"additionalProperties":false}`},
	{"deploy_pipeline",
		"Assembly: deploy a pipeline that passed validate_pipeline. Returns {deployed, deployment_id, status, errors}; a pipeline that was not validated is refused (deployed false, errors say why).",
		`{"type":"object","properties":{"pipeline_id":{"type":"string","description":"The pipeline_id of a validated pipeline."}},"required":["pipeline_id"],"additionalProperties":false}`},
}

var workflowToolsJSON = func() []workflowObj {
	out := make([]workflowObj, len(workflowTools))
	for i, t := range workflowTools {
		out[i] = workflowObj{
			{Key: "type", Value: "function"},
			{Key: "name", Value: t.name},
			{Key: "description", Value: t.description},
			{Key: "parameters", Value: json.RawMessage(t.parameters)},
			{Key: "strict", Value: false},
		}
	}
	return out
}()

// Steps are the workflow server's steps for the workflow arm, in the steps-file format the
// workflow policy reads: discovery, configuration, assembly.
var Steps = []plan.Step{
	{
		Name: "discovery",
		Prompt: "Step 1 of 3: discovery. Follow this workflow in order. Do NOT skip steps or go back.\n" +
			"1. Find every component the request needs with search_components or list_components.\n" +
			"2. Check a candidate with get_component_info ONCE when in doubt; never pick a deprecated component.\n" +
			"3. Do not configure anything yet.\n" +
			"When done, answer with the chosen components in pipeline order (source, transforms, sink): component_id, name and kind of each.",
		Tools:           []string{"search_components", "list_components", "get_component_info"},
		ValidationTools: []string{},
		MaxIterations:   10,
		MaxRetries:      3,
	},
	{
		Name: "configuration",
		Prompt: "Step 2 of 3: configuration. Follow this workflow in order. Do NOT skip steps or go back.\n" +
			"1. Get each chosen component's configuration schema with get_config_schema (ONCE per component).\n" +
			"2. Configure each component with the values the request asks for; take enum values, and the credential or worker pool of the requested environment, from the schema.\n" +
			"3. Validate every configuration with validate_config.\n" +
			"4. If validation fails: FIX the configuration and re-validate (do NOT go back to step 1).\n" +
			"When every configuration is valid, answer with each component_id and its normalized_config.",
		Tools:           []string{"get_config_schema", "validate_config"},
		ValidationTools: []string{"validate_config"},
		MaxIterations:   10,
		MaxRetries:      3,
	},
	{
		Name: "assembly",
		Prompt: "Step 3 of 3: assembly. Follow this workflow in order. Do NOT skip steps or go back.\n" +
			"1. Assemble the pipeline with assemble_pipeline: the components in order (source first, sink last), each with its validated normalized_config.\n" +
			"2. Validate it with validate_pipeline.\n" +
			"3. If validation fails: FIX what it reports, assemble again and re-validate (do NOT go back to earlier steps).\n" +
			"4. Deploy the validated pipeline with deploy_pipeline.\n" +
			"When it is deployed, answer with a JSON summary: {\"pipeline_id\": ..., \"deployment_id\": ..., \"status\": ...}.",
		Tools:           []string{"assemble_pipeline", "validate_pipeline", "deploy_pipeline"},
		ValidationTools: []string{"validate_pipeline"},
		MaxIterations:   10,
		MaxRetries:      3,
	},
}

// WriteSteps writes Steps as indented JSON (data/workflow.steps.json).
func WriteSteps(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(Steps)
}
