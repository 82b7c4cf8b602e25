// Package counter is rollout's "counter" resource server: NeMo Gym's session-state example task
// (one integer counter per session) with the failure modes of session state made explicit
// (a tool call on a session never seeded is 409 session_not_found, not a silent 0), big integers,
// a bounded call history, and a hand-written codec for its state.
package counter
