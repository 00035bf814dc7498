// Package natsd runs the NATS server of a deployment split into
// processes: the server of `toolbus nats`, with JetStream, and the
// credentials of the secured deployment that `toolbus nats-credentials`
// writes.
//
// A [Config] says where the server listens and stores, which nats-server
// configuration file it reads, and how clients authenticate; [Start]
// starts a server from it once [Config.Validate] accepts it and waits
// until JetStream is ready, and [Run] runs one until its context ends,
// after printing the lines that join an ingress and a worker to it.
//
// The bus is never open by accident. Without a configuration file or a
// token, the server has the users of deploy/nats/cluster-secure.conf
// ([deploy.Users]) with the permissions [deploy.Permissions] gives them,
// and their passwords are kept in files of the JetStream store's
// directory (worker.password, mode 0600): made at the first start, read
// at every later one, so that a restart keeps them and the parts
// reconnect. The ready lines say which: "made now" or "kept from an
// earlier start".
//
// [WriteCredentials] writes the passwords of those users, and the key the
// ingress replicas share, for the compose file or for Kubernetes.
package natsd
