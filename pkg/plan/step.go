package plan

// Step is one step of a workflow, in the steps-file format of the workflow policy (pkg/agent
// reads and runs it) and of the workflow server's steps (pkg/servers/workflow writes them).
type Step struct {
	// Name names the step in messages and records ("discovery").
	Name string `json:"name"`
	// Prompt is the step's instructions, sent as a user message when the step starts.
	Prompt string `json:"prompt"`
	// Tools are the only tools offered in the step; each must be one of the task's tools.
	Tools []string `json:"tools"`
	// ValidationTools are tools of the step that must have been called in the step attempt,
	// and whose last answers passed ({"valid": true}), before its final answer is accepted.
	ValidationTools []string `json:"validation_tools"`
	// MaxIterations bounds the model calls of one attempt of the step (0: the policy's default).
	MaxIterations int `json:"max_iterations"`
	// MaxRetries is how many times a failed attempt is retried from the step's start: a step
	// gets 1+MaxRetries attempts. The workflow policy fills in its default when a steps file
	// leaves it out.
	MaxRetries int `json:"max_retries"`
}
