// Package extraction is rollout's "extraction" resource server (multi-step data extraction from
// simulated regional databases, each task row carrying its own small world) and Generate, the
// generator of its task files (data/extraction.jsonl).
package extraction
