// Package gym is the framework of rollout's built-in resource servers: a ResourceServer (a
// server's tools, seed_session and verify) becomes an http.Handler that speaks the NVIDIA NeMo
// Gym resource-server protocol:
//
//   - GET  /              liveness, answers {"status":"ok"}
//   - POST /seed_session  the whole task row; sets up per-session state; answers {}
//   - POST /{tool}        the tool's JSON arguments object; answers the tool's JSON result
//   - POST /verify        the task row plus "response"; answers the request's fields plus
//     "reward" and the server's reward components
//   - POST /end_session   rollout's extension: the session's state is dropped at once
//
// Sessions are a signed cookie (HMAC-SHA256 over a random session id, keyed with a secret kept
// in the session store, so that instances sharing a store accept each other's cookies; or with
// a key given, which also seals the state, and then the cookie carries, signed, the version of
// the session's latest state the client was answered with). Every response carries the cookie; a request without a valid one starts a new, empty session, so a
// client that loses its cookie scores 0 on a stateful server, exactly as with NeMo Gym; a
// seeded session whose state is gone is answered 409 session_not_found (ErrSessionLost). Bad
// arguments are answered 422 with a FastAPI-style {"detail": [...]} body (ValidationErrors); a
// tool's own HTTPException (404 for an unknown id, ...) with its status and {"detail": "..."}
// (DetailError); an error NeMo Gym's Python would raise is answered 500 with the exception's
// repr as a JSON string (PyError), as NeMo Gym's exception middleware does.
//
// The rest is what the servers share to behave like their Python originals: request bodies read
// into an Object that keeps its members' order and raw values (a one-pass scanner with an
// encoding/json fallback), a tool's arguments read and validated in one call (Args, Arg,
// RequiredAs), pydantic's lax conversions (LaxInt, LaxString, ...), Python's
// equality and type names (PyEqual, PyTypeName), and JSON written the way Python's json.dumps
// writes it (PyFloat, MarshalFields).
package gym
