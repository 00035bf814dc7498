package node

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/ingress/dashboard"
)

// dashboardGatherWait is how long the dashboard listens for the
// cluster's ingresses and workers when it gathers their statuses. Their
// answers come from processes on the same NATS cluster, within
// milliseconds; the dashboard gathers at most every few seconds.
const dashboardGatherWait = 250 * time.Millisecond

// natsStateTimeout bounds the round trip and the JetStream account
// request of one description of the bus.
const natsStateTimeout = time.Second

// natsState describes the bus as nc sees it, for the dashboard: the
// server it is connected to, the servers it knows, and the JetStream
// account's usage.
func natsState(ctx context.Context, nc *nats.Conn) dashboard.NATSState {
	st := dashboard.NATSState{
		Connected:  nc.IsConnected(),
		Status:     nc.Status().String(),
		Servers:    nc.Servers(),
		Reconnects: nc.Stats().Reconnects,
	}
	if !st.Connected {
		return st
	}
	st.ServerName, st.ServerID, st.Cluster = nc.ConnectedServerName(), nc.ConnectedServerId(), nc.ConnectedClusterName()
	st.ServerVersion, st.URL = nc.ConnectedServerVersion(), nc.ConnectedUrlRedacted()
	ctx, cancel := context.WithTimeout(ctx, natsStateTimeout)
	defer cancel()
	if rtt, err := nc.RTT(); err == nil {
		st.RTTMs = float64(rtt) / float64(time.Millisecond)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		st.JetStreamError = err.Error()
		return st
	}
	info, err := js.AccountInfo(ctx)
	if err != nil {
		st.JetStreamError = err.Error()
		return st
	}
	st.JetStream = &dashboard.JetStreamState{
		Memory: info.Memory, Storage: info.Store, MaxMemory: info.Limits.MaxMemory, MaxStorage: info.Limits.MaxStore,
		Streams: info.Streams, Consumers: info.Consumers, Domain: info.Domain,
	}
	return st
}
