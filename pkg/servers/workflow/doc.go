// Package workflow is rollout's "workflow" resource server (assemble a data pipeline from a
// component catalogue in three steps: discovery, configuration, assembly), Generate, the generator
// of its task files (data/workflow.jsonl), and Steps, the steps file of the workflow policy
// (data/workflow.steps.json).
package workflow
