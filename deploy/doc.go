// Package deploy holds no code: it is the home of toolbus's container
// images (toolbus.Dockerfile, nats.Dockerfile, built by build-images.sh),
// the compose file of a local cluster (compose.yaml, nats/cluster.conf) and
// the Kubernetes manifests (k8s/). Its tests parse every manifest and check
// the kinds and the fields the cluster depends on; deploy/README.md
// documents each file.
package deploy
