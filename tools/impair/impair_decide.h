/* SPDX-License-Identifier: Apache-2.0 */
/* The impairment decision: a pure function of (config, packet index), compiled into the BPF
 * program and into host C++, so tests predict every decision the program makes.
 *
 * Counter-based randomness (splitmix64 of seed + i * golden ratio) rather than a PRNG state
 * stepped per packet: CPUs running the hook at the same time only share an atomic counter,
 * and a given seed and packet order always give the same decisions.
 *
 * Precedence: drop, else hold (reorder), else duplicate; the three draws are independent, so
 * P(drop) = d, P(hold) = (1 - d) r, P(duplicate) = (1 - d)(1 - r) u.
 */
#ifndef INFERGATE_TOOLS_IMPAIR_IMPAIR_DECIDE_H
#define INFERGATE_TOOLS_IMPAIR_IMPAIR_DECIDE_H

#include <linux/types.h>

#include "impair_shared.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

enum ig_impair_decision {
	IG_IMP_PASS = 0,
	IG_IMP_DROP = 1,
	IG_IMP_HOLD = 2,
	IG_IMP_DUP = 4,
};

static __always_inline __u64 ig_impair_mix(__u64 z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}

static __always_inline int ig_impair_hit(__u32 draw, __u32 threshold)
{
	return threshold == IG_IMPAIR_ALWAYS || draw < threshold;
}

/* The decision for the index-th matching packet. */
static __always_inline __u32 ig_impair_decide(const struct ig_impair_config *cfg, __u64 index)
{
	__u64 a = ig_impair_mix(cfg->seed + (index + 1) * 0x9e3779b97f4a7c15ULL);
	__u64 b = ig_impair_mix(a ^ 0x2545f4914f6cdd1dULL);

	if (ig_impair_hit((__u32)a, cfg->drop))
		return IG_IMP_DROP;
	if (ig_impair_hit((__u32)(a >> 32), cfg->reorder))
		return IG_IMP_HOLD;
	if (ig_impair_hit((__u32)b, cfg->dup))
		return IG_IMP_DUP;
	return IG_IMP_PASS;
}

#endif /* INFERGATE_TOOLS_IMPAIR_IMPAIR_DECIDE_H */
