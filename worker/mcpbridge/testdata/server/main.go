// Command server is an MCP server over stdio for the bridge's tests: its
// tool "crash" makes it exit, so that the bridge must start it again, and
// "pid" tells which process answered.
package main

import (
	"context"
	"log"
	"os"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type greetArgs struct {
	Name string `json:"name"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "testserver", Version: "0.1.0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "greet", Description: "says hello"},
		func(_ context.Context, _ *mcp.CallToolRequest, a greetArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hello, " + a.Name}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "crash"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}
