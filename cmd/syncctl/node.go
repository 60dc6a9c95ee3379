package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

func runNode(ctx context.Context, e *env, args []string) int {
	const cmd = "node"
	f := newFlagSet(e, cmd, "add <id> <raft host:port> | remove <id> [-admin host:port]", `
Changes the cluster's membership online, through any node's admin HTTP server.

  add <id> <raft host:port>   register a new node; then start it with -node-id <id> -raft-addr
                              <host:port> -join <any node's Raft address> (starting it with
                              -join alone also registers it). The cluster places replicas on it,
                              one move at a time, once it answers.
  remove <id>                 move the node's replicas to the other nodes; once it holds none
                              it is dropped from the cluster and can be stopped. Watch it with
                              syncctl cluster status.`, `
syncctl node add n4 10.0.0.4:7400
syncctl node remove n2`)
	var admin adminFlags
	admin.register(f)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			f.Usage()
			return exitOK
		}
		fmt.Fprintln(e.stderr, "syncctl node: want a subcommand: add or remove (see -h)")
		return exitUsage
	}
	sub, rest := args[0], args[1:]
	var pos []string
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		pos, rest = append(pos, rest[0]), rest[1:]
	}
	if code, ok := parse(e, f, rest); !ok {
		return code
	}
	var path string
	switch {
	case sub == "add" && len(pos) == 2:
		path = "/v1/nodes?id=" + url.QueryEscape(pos[0]) + "&raft_addr=" + url.QueryEscape(pos[1])
	case sub == "remove" && len(pos) == 1:
		path = "/v1/nodes/" + url.PathEscape(pos[0]) + "/remove"
	default:
		fmt.Fprintf(e.stderr, "syncctl node: want add <id> <raft host:port> or remove <id>, got %s %v (see -h)\n", sub, pos)
		return exitUsage
	}
	if err := admin.Call(ctx, http.MethodPost, path, nil); err != nil {
		e.reportAdmin(cmd+" "+sub, err)
		return exitFail
	}
	if sub == "add" {
		fmt.Fprintf(e.stdout, "%s registered at %s; start it with -node-id %s -raft-addr %s -join <a node's Raft address>\n", pos[0], pos[1], pos[0], pos[1])
	} else {
		fmt.Fprintf(e.stdout, "%s is being removed: its replicas move to the other nodes (syncctl cluster status shows progress)\n", pos[0])
	}
	return exitOK
}
