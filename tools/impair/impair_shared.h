/* SPDX-License-Identifier: Apache-2.0 */
/* The contract between the fault injector (impair.bpf.c) and its control plane
 * (impairer.cc, the infergate-impair CLI, tests). Every struct that crosses the BPF boundary
 * is defined here once: fixed-width fields, explicit padding; the C++ side checks sizes and
 * offsets with static_asserts at the bottom of this file. All fields are host byte order.
 */
#ifndef INFERGATE_TOOLS_IMPAIR_IMPAIR_SHARED_H
#define INFERGATE_TOOLS_IMPAIR_IMPAIR_SHARED_H

#include <linux/types.h>

/* A held (reordered) frame is copied into a map value: frames longer than this are never
 * held (counted as IG_IMP_HOLD_SKIPPED). Covers a 1500-byte MTU plus Ethernet and VLAN. */
#define IG_IMPAIR_MAX_HELD 2048
/* skb->mark of the copies the program sends itself (duplicates, released frames): they pass
 * the program untouched when they come through the same hook again. Load-time knob too. */
#define IG_IMPAIR_DEFAULT_MARK 0x1a9e0001u
/* The cls_bpf filter's handle and priority on the clsact hook (detach finds it by them). */
#define IG_IMPAIR_TC_HANDLE 0x1a9e
#define IG_IMPAIR_TC_PRIO 0x1a9e
/* Probability 1 as a threshold: a draw r (uniform in [0, 2^32)) is "hit" when r < threshold,
 * and always when threshold == IG_IMPAIR_ALWAYS. */
#define IG_IMPAIR_ALWAYS 0xffffffffu

/* Run-time configuration: one entry in ig_imp_config, written by the control plane. */
struct ig_impair_config {
	__u64 seed;      /* decisions of packet i are a pure function of (seed, i) */
	__u32 drop;      /* P(drop)      * 2^32 (see IG_IMPAIR_ALWAYS) */
	__u32 dup;       /* P(duplicate) * 2^32 */
	__u32 reorder;   /* P(hold back and release after the next packet) * 2^32 */
	__u32 l4_proto;  /* 0: every IPv4/IPv6 packet; else only this IP protocol (6 = TCP) */
	__u32 enabled;   /* 0: pass everything untouched (counted as packets only) */
	__u32 pad;
};

/* Per-attachment packet sequence: packet i (in matching order) is decided by (seed, i). */
struct ig_impair_seq {
	__u64 next;
};

/* The slot of the held frame. state moves EMPTY -> FILLING -> FULL -> RELEASING -> EMPTY,
 * each step by an atomic operation, so concurrent CPUs never read a half-written frame. */
enum ig_impair_held_state {
	IG_IMP_HELD_EMPTY = 0,
	IG_IMP_HELD_FILLING = 1,
	IG_IMP_HELD_FULL = 2,
	IG_IMP_HELD_RELEASING = 3,
};

struct ig_impair_held {
	__u64 state;     /* enum ig_impair_held_state */
	__u32 len;       /* frame length, Ethernet header included */
	__u16 ethertype; /* network byte order, as in the frame: only released onto the same */
	__u8 l4_proto;   /* ... and the same IP protocol */
	__u8 pad;
	__u8 data[IG_IMPAIR_MAX_HELD];
};

/* Per-CPU counters, index = enum ig_impair_counter. */
enum ig_impair_counter {
	IG_IMP_PACKETS = 0,    /* every packet the hook saw, our own copies excluded */
	IG_IMP_MATCHED,        /* IP packets that matched the filter and got a decision */
	IG_IMP_DROPPED,        /* dropped (silently: TC_ACT_STOLEN, the sender sees success) */
	IG_IMP_DUPLICATED,     /* a second copy sent right behind the original */
	IG_IMP_HELD,           /* held back (the reorder decision) */
	IG_IMP_RELEASED,       /* held frame sent right after a later packet */
	IG_IMP_HOLD_BUSY,      /* reorder decision while another frame was held: passed */
	IG_IMP_HOLD_SKIPPED,   /* reorder decision on a GSO or oversized frame: passed */
	IG_IMP_REINJECTED,     /* our own copies seen again by the hook (passed untouched) */
	IG_IMP_ERRORS,         /* a helper failed (clone, resize, store); the frame passed */
	IG_IMP_NUM_COUNTERS,
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct ig_impair_config) == 32, "ig_impair_config layout");
static_assert(offsetof(struct ig_impair_config, drop) == 8, "ig_impair_config layout");
static_assert(offsetof(struct ig_impair_config, enabled) == 24, "ig_impair_config layout");
static_assert(sizeof(struct ig_impair_seq) == 8, "ig_impair_seq layout");
static_assert(offsetof(struct ig_impair_held, data) == 16, "ig_impair_held layout");
static_assert(sizeof(struct ig_impair_held) == 16 + IG_IMPAIR_MAX_HELD, "ig_impair_held layout");
#endif

#endif /* INFERGATE_TOOLS_IMPAIR_IMPAIR_SHARED_H */
