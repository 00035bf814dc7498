// Package integration runs toolbus as it runs in production, one process
// per container, and breaks it on purpose. Its files build only with the
// integration tag:
//
//	go test -tags integration -count=1 -v ./integration/...
//
// [Start] brings up a whole cluster on a private Docker network from the
// images deploy/build-images.sh builds (the suite builds them first, under
// the tag [ImageTag] gives, this checkout's own unless TOOLBUS_IMAGE_TAG
// names another, so that checkouts sharing a Docker daemon keep apart): three
// NATS nodes with JetStream clustered, two ingress replicas and three
// workers. A [Load] sends batches of calls to the ingress replicas through
// their ports on 127.0.0.1 and records the fate of every request id; a
// [Tally] counts them as answered-ok, answered-error or unanswered. The
// scenarios kill, pause, stop, cut off and restart containers under that
// load and check that every id is answered and that no job is lost or
// finished twice.
//
// The tests need Docker Engine and fail, rather than skip, without it.
package integration
