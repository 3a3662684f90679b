package attempt

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// RunHelper runs the helper and exits if this process was started as an
// attempt's helper by Start; otherwise it returns at once. Call it first
// thing in main, and in TestMain of tests that start attempts.
func RunHelper() {
	cfg, ok := os.LookupEnv(helperEnv)
	if !ok {
		return
	}
	os.Unsetenv(helperEnv)
	os.Exit(runHelper(cfg))
}

// helper is the state of the helper process.
type helper struct {
	cfg    helperConfig
	events *os.File
	tree   *tree // OS-specific: the tree's processes

	evMu sync.Mutex // serialises event lines

	killMu  sync.Mutex // protects killing
	killing bool
}

func (h *helper) emit(ev event) {
	b, _ := json.Marshal(ev)
	h.evMu.Lock()
	h.events.Write(append(b, '\n')) // the supervisor is gone: carry on
	h.evMu.Unlock()
}

func runHelper(cfgJSON string) int {
	// fd 3: commands from the supervisor; fd 4: events to it; fd 5: the
	// score pipe, the command's fd 3.
	ctl := os.NewFile(3, "attempt-control")
	events := os.NewFile(4, "attempt-events")
	if ctl == nil || events == nil {
		fmt.Fprintln(os.Stderr, "branchnfs attempt helper: started without its pipes")
		return 1
	}
	// The command must not inherit the helper's pipes: with them it could
	// forge events, or keep the event pipe open after killing the helper
	// so that the supervisor never learns the helper is gone.
	for fd := 3; fd <= 5; fd++ {
		syscall.CloseOnExec(fd)
	}
	h := &helper{events: events}
	if err := json.Unmarshal([]byte(cfgJSON), &h.cfg); err != nil || len(h.cfg.Argv) == 0 {
		h.emit(event{Event: "error", Error: fmt.Sprintf("bad helper configuration: %v", err)})
		return 1
	}
	var score *os.File
	if h.cfg.Score {
		score = os.NewFile(5, "attempt-score")
	}
	// The terminal's signals are for the supervisor, which decides.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGPIPE)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)

	t, err := newTree(h.cfg.NoCgroup)
	if err != nil {
		h.emit(event{Event: "error", Error: err.Error()})
		return 1
	}
	h.tree = t
	cmd := exec.Command(h.cfg.Argv[0], h.cfg.Argv[1:]...)
	cmd.Dir = h.cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if score != nil {
		cmd.ExtraFiles = []*os.File{score}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := t.start(cmd); err != nil {
		t.cleanup()
		msg := err.Error()
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, os.ErrNotExist) {
			msg = fmt.Sprintf("%v (in %s)", err, dirOrDot(h.cfg.Dir))
		}
		h.emit(event{Event: "error", Error: msg})
		return 1
	}
	if score != nil {
		score.Close()
	}
	leader := cmd.Process.Pid
	h.emit(event{Event: "started", Info: t.info(leader)})

	go func() {
		sc := bufio.NewScanner(ctl)
		for sc.Scan() {
			switch sc.Text() {
			case "term":
				t.signal(syscall.SIGTERM)
			case "kill":
				h.killLoop()
			}
		}
		// The supervisor is gone (or let go): end the tree.
		h.end()
	}()
	go func() {
		<-term
		h.end()
	}()

	st, ok := t.reap(leader)
	if ok {
		h.emit(event{Event: "exited", Status: st})
	}
	t.waitGone()
	t.cleanup()
	h.emit(event{Event: "gone"})
	return 0
}

// end ends the tree without the supervisor: SIGTERM, grace, SIGKILL.
func (h *helper) end() {
	h.tree.signal(syscall.SIGTERM)
	time.Sleep(h.cfg.Grace)
	h.killLoop()
}

// killLoop sends SIGKILL to the tree now and every 20 ms after, so that a
// process forked while the first round was sent is caught too. It returns
// at once; the helper exits when the tree is gone.
func (h *helper) killLoop() {
	h.killMu.Lock()
	already := h.killing
	h.killing = true
	h.killMu.Unlock()
	h.tree.kill()
	if already {
		return
	}
	go func() {
		for {
			time.Sleep(20 * time.Millisecond)
			h.tree.kill()
		}
	}()
}

func dirOrDot(d string) string {
	if d == "" {
		return "the current directory"
	}
	return d
}

// statusOf converts a wait status.
func statusOf(ws syscall.WaitStatus) Status {
	if ws.Signaled() {
		return Status{Code: -1, Signal: int(ws.Signal())}
	}
	return Status{Code: ws.ExitStatus()}
}

// signalGroup sends sig to the tree's process group until the group is
// found empty. An empty group never fills again (no process can join a
// group that does not exist), and its number may then be reused by an
// unrelated process that makes itself a group leader, so it is never
// signalled again.
func (t *tree) signalGroup(sig syscall.Signal) {
	if t.pgid <= 0 || t.groupGone.Load() {
		return
	}
	if err := syscall.Kill(-t.pgid, sig); err == syscall.ESRCH {
		t.groupGone.Store(true)
	}
}
