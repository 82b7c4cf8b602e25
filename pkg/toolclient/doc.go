// Package toolclient is the client side of the NeMo Gym resource-server protocol: a Server is a
// resource server at a base URL, shared by all rollouts; each rollout opens its own Session,
// which carries the server's session cookie from POST /seed_session through every tool call
// (POST /{tool}) to POST /verify, and finally POST /end_session where the server takes it.
//
// seed_session and verify are retried (Server.Retry); tool calls are not, since they may change
// the session's state. Tool names that could leave the base URL and arguments that are not one
// JSON object never reach the server: the model gets an "Error: ..." output instead.
package toolclient
