/* SPDX-License-Identifier: (GPL-2.0-only OR MIT) */
/*
 * Mutation switches: each makes one program measure wrong in one known
 * way, which a live test must then catch - the test's proof that it can
 * fail. They exist only where the build defines LATMON_TEST_HOOKS
 * (build.rs, for the cargo feature `test-hooks` that scripts/test.sh
 * builds the tests with); a release object has no switch, no `mutate`
 * field and no branch, so nothing test-only ships.
 *
 * LATMON_MUTATED(n): the including object's `cfg.mutate` is n (its
 * values are listed at the field in bpf/latmon.h); LATMON_MUTATING: any
 * mutation is on. Both 0 without the hooks, which the compiler folds away.
 */
#ifndef __TEST_HOOKS_BPF_H
#define __TEST_HOOKS_BPF_H

#ifdef LATMON_TEST_HOOKS
#define LATMON_MUTATED(n) (cfg.mutate == (n))
#define LATMON_MUTATING (cfg.mutate != 0)
#else
#define LATMON_MUTATED(n) 0
#define LATMON_MUTATING 0
#endif

#endif /* __TEST_HOOKS_BPF_H */
