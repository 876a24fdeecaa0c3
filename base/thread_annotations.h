// Clang's thread-safety annotations (-Wthread-safety), empty for other
// compilers: what a lock guards and which locks a function needs are
// checked by the compiler, not only written in comments. tests/lint/
// thread_safety.sh compiles every file that uses them with clang and
// fails on a finding. base/mutex.h has the annotated mutex.
#pragma once

#if defined(__clang__)
#define RILL_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define RILL_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) RILL_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY RILL_THREAD_ANNOTATION(scoped_lockable)
// A member read or written only with the lock held.
#define GUARDED_BY(x) RILL_THREAD_ANNOTATION(guarded_by(x))
// A function called only with the lock held.
#define REQUIRES(...) RILL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) RILL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) RILL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
