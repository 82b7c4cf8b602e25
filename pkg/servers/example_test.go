package servers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// A built-in server on loopback, called as a rollout calls it: seed the session with the task
// row, make the tool calls, then verify (the cookie jar of the session carries the session).
func Example() {
	srv, err := servers.New("counter", servers.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()

	client, err := toolclient.New("counter", hs.URL, http.DefaultTransport)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	s := client.NewSession()
	row := `{"responses_create_params":{"input":"Add 2, then 3."},"initial_count":1,"expected_count":6}`
	if err := s.Seed(ctx, []byte(row)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.CallTool(ctx, "increment_counter", `{"count": 2}`).Output)
	fmt.Println(s.CallTool(ctx, "increment_counter", `{"count": 3}`).Output)

	response := `{"id":"resp_1","created_at":0,"model":"m","object":"response","parallel_tool_calls":false,` +
		`"tool_choice":"auto","tools":[],"output":[]}`
	status, answer, err := s.PostVerify(ctx, []byte(row[:len(row)-1]+`,"response":`+response+`}`))
	if err != nil {
		log.Fatal(err)
	}
	var v struct {
		Reward float64 `json:"reward"`
	}
	if err := json.Unmarshal(answer, &v); err != nil {
		log.Fatal(err)
	}
	fmt.Println(status, v.Reward)
	// Output:
	// {"success": true, "count": 3}
	// {"success": true, "count": 6}
	// 200 1
}
