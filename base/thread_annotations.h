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
// A pointer member whose pointee is read or written only with the lock held.
#define PT_GUARDED_BY(x) RILL_THREAD_ANNOTATION(pt_guarded_by(x))
// A function called only with the lock held, or only without it.
#define REQUIRES(...) RILL_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) RILL_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) RILL_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) RILL_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) RILL_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) RILL_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) RILL_THREAD_ANNOTATION(lock_returned(x))
// For the rare function the analysis cannot follow; say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS RILL_THREAD_ANNOTATION(no_thread_safety_analysis)
