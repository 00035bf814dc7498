//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestMain fails the whole suite, loudly, when Docker is not there: these
// tests exist to run, never to skip. It builds the images unless
// TOOLBUS_SKIP_IMAGE_BUILD=1 says they were just built (as .ci/run does),
// under the tag TOOLBUS_IMAGE_TAG names or else this checkout's own.
func TestMain(m *testing.M) {
	// The tests remove every container and network they make themselves;
	// Ryuk, the reaper container, would have to be pulled from a registry.
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the integration suite needs Docker Engine: docker info: %v\n%s\n", err, out)
		os.Exit(1)
	}
	// The images of this checkout, built and run under one tag.
	tag, err := ImageTag(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
	os.Setenv(ImageTagVar, tag)
	if os.Getenv("TOOLBUS_SKIP_IMAGE_BUILD") != "1" {
		build := exec.CommandContext(ctx, buildScript())
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: deploy/build-images.sh: %v\n", err)
			os.Exit(1)
		}
	}
	toolbusImage, natsImage := Images(tag)
	for _, image := range []string{toolbusImage, natsImage} {
		if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", image).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: image %s is missing (deploy/build-images.sh builds it): %v\n%s\n", image, err, out)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
