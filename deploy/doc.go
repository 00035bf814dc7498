// Package deploy is the home of toolbus's container images
// (toolbus.Dockerfile, nats.Dockerfile, built by build-images.sh), the NATS
// configurations (nats/), the compose file of a local cluster
// (compose.yaml) and the Kubernetes manifests (k8s/), which all run the
// secured NATS configuration nats/cluster-secure.conf.
//
// Its code generates what that configuration needs and no file may hold:
// the NATS users' passwords ([NewCredentials]), as the environment file the
// compose file reads ([Credentials.WriteEnv]) or as the Kubernetes Secrets
// the manifests refer to ([Credentials.WriteSecrets]); `toolbus
// nats-credentials` writes them. [Permissions] reads each user's
// permissions from the built-in nats/cluster-secure.conf, so that `toolbus
// nats` started without a configuration grants its users exactly what the
// shipped file grants. Its tests parse every manifest and check
// the kinds and the fields the cluster depends on, and run the secured
// configuration to prove what each user may and may not do;
// deploy/README.md documents each file.
package deploy
