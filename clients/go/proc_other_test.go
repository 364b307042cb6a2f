//go:build !linux

package delayq_test

import "os/exec"

func dieWithTests(cmd *exec.Cmd) {}
