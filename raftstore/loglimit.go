package raftstore

import (
	"sync"
	"time"
)

// logLimiter bounds how often lines of one kind are logged. The first line of a kind passes;
// repeats within logLimitWindow are counted and held back; the first one after the window passes
// and says how many were held back. A full disk or an unreachable peer makes Pebble and raft
// repeat the same error as fast as they retry (a restart on a full disk once logged 45,000 lines
// in 70 s), which buries everything else and can fill the disk holding the logs. The zero value
// is not usable (see newLogLimiter); a nil *logLimiter lets every line pass. Safe for concurrent
// use.
type logLimiter struct {
	mu    sync.Mutex
	kinds map[string]*logKind // REQUIRES: mu
}

type logKind struct {
	until time.Time // repeats before this are held back
	held  int       // lines held back since the last one logged
}

const (
	// logLimitWindow is how long repeats of a kind are held back after a line of it is logged.
	logLimitWindow = 10 * time.Second
	// logLimitKinds bounds the kinds remembered; past it the windows that have ended are
	// forgotten, and if none has, all of them (a burst of new kinds then passes once more).
	logLimitKinds = 256
)

func newLogLimiter() *logLimiter { return &logLimiter{kinds: map[string]*logKind{}} }

// allow reports whether a line of kind may be logged at now, and how many lines of the kind were
// held back since the last one logged.
func (l *logLimiter) allow(kind string, now time.Time) (ok bool, held int) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.kinds[kind]
	if k == nil {
		if len(l.kinds) >= logLimitKinds {
			l.forgetLocked(now)
		}
		k = &logKind{}
		l.kinds[kind] = k
	}
	if now.Before(k.until) {
		k.held++
		return false, 0
	}
	held, k.held, k.until = k.held, 0, now.Add(logLimitWindow)
	return true, held
}

// forgetLocked drops the kinds whose window has ended with nothing held back, or every kind if
// that frees nothing.
// REQUIRES: l.mu
func (l *logLimiter) forgetLocked(now time.Time) {
	for name, k := range l.kinds {
		if !now.Before(k.until) && k.held == 0 {
			delete(l.kinds, name)
		}
	}
	if len(l.kinds) >= logLimitKinds {
		clear(l.kinds)
	}
}
