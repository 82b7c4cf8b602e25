// Package nemogym holds Go ports of NVIDIA NeMo Gym's three example resource servers, written
// from their documented and observable behaviour and checked against NeMo Gym's own recorded
// rollouts (testdata/nemo-gym):
//
//   - MultiStep        example_multi_step: look up synonyms' values, then extract them
//   - SessionStateMgmt example_session_state_mgmt: one counter per session
//   - SingleToolCall   example_single_tool_call: one get_weather tool, reward always 1
package nemogym
