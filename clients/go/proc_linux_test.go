package delayq_test

import (
	"os/exec"
	"syscall"
)

// dieWithTests has the process killed when the test binary dies (a
// panic, go test's -timeout), so no Redis or node outlives the tests.
func dieWithTests(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
