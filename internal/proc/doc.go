// Package proc supervises child processes: the bench's clusters and load
// generators, and the worker the conformance kit checks. [Start] runs a
// program in a process group of its own, waits for the line it prints when
// it is ready, and keeps the last lines of its output for the sentence
// that says why it never got ready or why it ended. [Process.Stop] ends
// the whole group, SIGTERM first and SIGKILL after a bound, and so does the
// end of the context Start was given.
//
// A supervisor that dies without stopping its children (SIGKILL, a crash)
// leaves no orphans on Linux: the child gets SIGKILL from the kernel's
// parent-death signal as its parent dies. That signal reaches the child
// alone; what the child started itself outlives it unless the child ends
// it, so run the program itself rather than a wrapper (`go run`, a shell
// that does not exec) where that matters. Linux sends the signal when the
// thread that started the child ends, not the process: Go ends a thread
// only when a goroutine locked to it with [runtime.LockOSThread] returns,
// so do not call Start from such a goroutine.
//
// Other Unix systems (macOS, the BSDs) have no parent-death signal that Go
// can ask for: there the group and Stop work alike, but a child whose
// supervisor is killed keeps running until it ends by itself. Systems that
// are not Unix (Windows) have no process groups either: Stop kills the
// child alone, at once, and its own children are left running.
package proc
