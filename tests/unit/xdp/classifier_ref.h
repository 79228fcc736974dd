// The XDP classifier's HTTP stages as they were before issue 15's speed-ups (commit 5df332f:
// ig_classify_start with a byte loop for short targets, one-word target scan, 32-bit header
// scan), frozen here as the reference the optimised xdp/classifier.h must agree with, field
// for field (tests/unit/xdp/classifier_test.cc, tests/fuzz/xdp_classifier_fuzz.cc). Not
// used by the program. Include after xdp/classifier.h; everything lives in
// infergate::xdp::ref (names ref_*) and calls classifier.h's unchanged helpers (ig_check_h2, ig_reject...).
#pragma once

#include "xdp/classifier.h"

namespace infergate::xdp::ref {

// clang-format off
/* Looks for "x-infergate-priority: <digit>" in the header block of hdr_len bytes at hdr_off.
 * One verifier path per step: the position advances without branches. */
IG_INLINE __u8 ref_find_priority(const __u8 *data, const __u8 *end, __u32 hdr_off, __u32 avail)
{
	const __u8 *h, *q;
	__u32 i = 0, n, line = 1;

	if (hdr_off > 0x7ff)
		return IG_CLASS_NONE;
	h = data + hdr_off;
	for (n = 0; n < IG_MAX_HDR_STEPS; n++) {
		__u64 w, m, none;
		if (i > 0x7ff)
			break;
		IG_BARRIER_VAR(i);
		q = h + (i & 0x7ff);
		if (line) {
			__u64 a, b, c;
			/* a header line: the name, a digit and CRLF need 24 bytes */
			if (i + 24 > avail || q + 24 > end)
				break;
			if (q[0] == '\r')
				break; /* end of the header block */
			a = ig_load64(q) | 0x2020202020202020ULL;
			b = ig_load64(q + 8) | 0x2020202020202020ULL;
			c = ig_load64(q + 16);
			/* "x-infergate-priority:" = "x-inferg" "ate-prio" "rity:", compared lower-cased
			 * ('-' and ':' already have bit 0x20 set) */
			if (a == 0x677265666e692d78ULL && b == 0x6f6972702d657461ULL &&
			    ((c | 0x2020202020ULL) & 0xffffffffffULL) == 0x3a79746972ULL) {
				__u8 v1 = (__u8)(c >> 40), v2 = (__u8)(c >> 48);
				if (v1 == ' ' || v1 == '\t')
					v1 = v2;
				if (v1 >= '0' && v1 < '0' + IG_NUM_CLASSES)
					return (__u8)(v1 - '0');
				return IG_CLASS_NONE;
			}
		}
		if (i + 8 > avail || q + 8 > end)
			break;
		w = ig_load64(q);
		m = ig_zero_bytes(w ^ 0x0a0a0a0a0a0a0a0aULL);
		none = ((m | (0 - m)) >> 63) ^ 1; /* 1 when the word holds no LF */
		/* next word, or the byte after the first LF */
		i += ig_first_flag_bf(m) + 1 + 7 * (__u32)none;
		line = 1 - (__u32)none;
	}
	return IG_CLASS_NONE;
}

/* Stage 1: method, start of the target, path prefixes and classes; the HTTP/2 preface.
 * Returns 1 when ref_scan_target must judge the rest of the request line. */
IG_INLINE int ref_classify_start(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				struct ig_parse *p, int known_first)
{
	const __u8 *pl, *t, *q;
	__u32 avail, mlen = 0, i, n, tavail;
	__u64 key = 0;
	int looks = 0;

	if (p->pl_off > 0x3ff)
		return 0; /* headers longer than any we build: leave it to the kernel */
	pl = data + p->pl_off;
	/* the IP length check proved pl + pl_len <= end; every access below is still checked
	 * against end for the verifier. Bytes past pl_len (Ethernet padding) are ignored. */
	avail = p->pl_len;
	if (known_first)
		p->tag_flags |= IG_TF_FIRST_SEGMENT;

	/* method token: 1..8 upper-case letters, then SP */
	if (avail >= 9 && pl + 9 <= end) {
		/* one word: the first SP, and every byte before it in 'A'..'Z' */
		__u64 w = ig_load64(pl), sp = ig_zero_bytes(w ^ 0x2020202020202020ULL);
		__u64 bytes, letters;
		if (sp)
			mlen = ig_first_flag_bf(sp);
		else
			mlen = pl[8] == ' ' ? 8 : 0;
		IG_BARRIER_VAR(mlen);
		mlen &= 0xf;
		bytes = mlen >= 8 ? ~0ULL : (1ULL << (8 * mlen)) - 1;
		/* for 7-bit bytes: >= 'A' sets the high bit of b + 0x3f, > 'Z' that of b + 0x25 */
		letters = ((w + 0x3f3f3f3f3f3f3f3fULL) & ~(w + 0x2525252525252525ULL) & ~w) & IG_HIGHS;
		if (mlen > 0 && (letters & bytes) == (IG_HIGHS & bytes)) {
			looks = 1;
			key = w & bytes;
		}
	} else {
		int letters = 1;
		for (i = 0; i < 9; i++) {
			__u8 c;
			q = pl + i;
			if (i >= avail || q + 1 > end)
				break;
			c = q[0];
			if (c == ' ') {
				if (i > 0) {
					looks = 1;
					mlen = i;
				}
				break;
			}
			if (c < 'A' || c > 'Z' || i == 8) {
				letters = 0;
				break;
			}
			key |= (__u64)c << (8 * i);
		}
		if (!looks && letters && i > 0 && i < 9 && i >= avail) {
			/* The segment ends inside the method (a client writing byte by byte): a
			 * request start if it is a prefix of an allowed method or of "PRI". */
			__u64 m = i >= 8 ? ~0ULL : (1ULL << (8 * i)) - 1; /* no shift by 64 */
			__u32 j;
			int ok = 0;
IG_UNROLL
			for (j = 0; j < IG_MAX_METHODS; j++)
				if (j < cfg->nmethods && (cfg->method_key[j] & m) == key)
					ok = 1;
			if (ok) {
				p->tag_flags |= IG_TF_REQUEST_START;
				p->reason = IG_R_REQUEST;
				return 0;
			}
			if ((0x495250ULL & m) == key && i <= 3) {
				ig_check_h2(pl, end, avail, cfg, p);
				return 0;
			}
			if (known_first)
				ig_reject(cfg, p, IG_R_BAD_METHOD);
			return 0;
		}
	}
	if (!looks) {
		if (known_first)
			ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		return 0; /* a continuation: nothing one segment can prove */
	}
	if (key == 0x495250ULL) { /* "PRI" */
		ig_check_h2(pl, end, avail, cfg, p);
		return 0;
	}
	p->tag_flags |= IG_TF_REQUEST_START;
	{
		int ok = 0;
IG_UNROLL
		for (i = 0; i < IG_MAX_METHODS; i++)
			if (i < cfg->nmethods && cfg->method_key[i] == key)
				ok = 1;
		if (!ok)
			{ ig_reject(cfg, p, IG_R_BAD_METHOD); return 0; }
	}

	/* request target: origin-form, under an allowed prefix */
	if (mlen > 8)
		return 0;
	t = pl + mlen + 1;
	tavail = avail - mlen - 1;
	if (mlen + 1 >= avail || t + 1 > end) {
		p->reason = IG_R_REQUEST; /* the segment ends here: nothing more to prove */
		return 0;
	}
	if (t[0] != '/')
		{ ig_reject(cfg, p, IG_R_BAD_PATH); return 0; }
	{
		__u64 w[IG_PREFIX_WORDS] = {0, 0, 0, 0}, have[IG_PREFIX_WORDS] = {0, 0, 0, 0};
		int allowed = 0, any_allow = 0;
		__u8 cls = IG_CLASS_NONE;
		if (tavail >= 32 && t + 32 <= end) {
IG_UNROLL
			for (i = 0; i < IG_PREFIX_WORDS; i++) {
				w[i] = ig_load64(t + 8 * i);
				have[i] = ~0ULL;
			}
		} else {
			for (i = 0; i < 32; i++) {
				IG_BARRIER_VAR(i);
		q = t + (i & 0x3fff); /* the mask is for the verifier: i <= 0x3fff already */
				if (i >= tavail || q + 1 > end)
					break;
				w[i / 8] |= (__u64)q[0] << (8 * (i % 8));
				have[i / 8] |= 0xffULL << (8 * (i % 8));
			}
		}
IG_UNROLL
		for (n = 0; n < IG_MAX_PREFIXES; n++) {
			int match = 1;
			if (n >= cfg->nprefixes)
				break;
IG_UNROLL
			for (i = 0; i < IG_PREFIX_WORDS; i++)
				if ((w[i] & cfg->prefix[n].mask[i] & have[i]) !=
				    (cfg->prefix[n].word[i] & have[i]))
					match = 0;
			if (cfg->prefix[n].allow) {
				any_allow = 1;
				if (match)
					allowed = 1;
			}
			if (match && cls == IG_CLASS_NONE)
				cls = cfg->prefix[n].cls;
		}
		if (any_allow && !allowed)
			{ ig_reject(cfg, p, IG_R_BAD_PATH); return 0; }
		p->cls = cls;
	}

	p->t_off = (__u16)(p->pl_off + mlen + 1);
	p->t_len = (__u16)tavail;
	p->reason = IG_R_REQUEST; /* provisional: ref_scan_target judges the rest */
	return 1;
}

/* Stage 2a of an HTTP/1 request start: skips visible-ASCII words of the target. Returns the
 * offset in the target where byte-wise judging starts, 0 when there is nothing to judge. */
IG_INLINE __u32 ref_scan_target_words(const __u8 *data, const __u8 *end, struct ig_parse *p)
{
	const __u8 *t, *q;
	__u32 i, n, tavail = p->t_len;

	if (p->t_off > 0x7ff || tavail == 0)
		return 0;
	t = data + p->t_off;
	/* find the SP that ends the target; every byte before it must be visible ASCII */
	i = 1;
	for (n = 0; n < IG_MAX_TARGET_WORDS; n++) {
		__u64 w, m;
		if (i > 0x3fff)
			break;
		IG_BARRIER_VAR(i);
		q = t + (i & 0x3fff); /* the mask is for the verifier: i <= 0x3fff already */
		if (i + 8 > tavail || q + 8 > end)
			break;
		w = ig_load64(q);
		m = ((w - 0x2121212121212121ULL) | w | (w + 0x0101010101010101ULL)) & IG_HIGHS;
		/* flags bytes < 0x21, >= 0x80 or == 0x7f (the +1 carries into the high bit) */
		if (!m) {
			i += 8;
			continue;
		}
		i += ig_first_flag(m);
		break;
	}
	if (n == IG_MAX_TARGET_WORDS)
		return 0; /* a very long target: userspace judges it */
	return i;
}

/* Stage 2b: from the byte the word scan stopped at (i, relative to the target), find the SP
 * that ends the target, then check the version. */
IG_INLINE void ref_check_target_end(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				   struct ig_parse *p, __u32 i)
{
	const __u8 *t, *v, *q;
	__u32 n, tavail = p->t_len;

	if (i == 0 || i > 0x3fff || p->t_off > 0x7ff)
		return;
	t = data + p->t_off;
	/* byte-wise over at most 8 bytes: the flagged byte, or the tail of the segment */
IG_UNROLL
	for (n = 0; n < 8; n++) {
		__u8 c;
		if (i > 0x3fff || i >= tavail) {
			p->reason = IG_R_REQUEST; /* segment ends inside the target */
			return;
		}
		IG_BARRIER_VAR(i);
		q = t + (i & 0x3fff); /* the mask is for the verifier: i <= 0x3fff already */
		if (q + 1 > end) {
			p->reason = IG_R_REQUEST;
			return;
		}
		c = q[0];
		if (c == ' ')
			break;
		if (c < 0x21 || c > 0x7e)
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		i++;
	}
	if (n == 8) {
		p->reason = IG_R_REQUEST;
		return;
	}

	/* "HTTP/1.0\r\n" or "HTTP/1.1\r\n" */
	if (i > 0x3fff)
		return;
	IG_BARRIER_VAR(i);
	v = t + ((i + 1) & 0x3fff);
	if (i + 1 + 10 <= tavail && v + 10 <= end) {
		__u64 a = ig_load64(v);
		if ((a & 0x00ffffffffffffffULL) != 0x002e312f50545448ULL ||
		    (v[7] != '0' && v[7] != '1')) {
			if ((a & 0xffffffffffULL) == 0x2f50545448ULL)
				return ig_reject(cfg, p, IG_R_BAD_VERSION);
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
		}
		if (v[8] != '\r' || v[9] != '\n')
			return ig_reject(cfg, p, IG_R_BAD_REQUEST_LINE);
	} else {
		const char ver[10] = {'H', 'T', 'T', 'P', '/', '1', '.', '1', '\r', '\n'};
		for (n = 0; n < 10; n++) {
			__u8 c;
			q = v + (n & 0xf);
			if (i + 1 + n >= tavail || q + 1 > end)
				break;
			c = q[0];
			if (n == 7 ? (c != '0' && c != '1') : c != (__u8)ver[n])
				return ig_reject(cfg, p, n >= 5 && n < 8 ? IG_R_BAD_VERSION
									 : IG_R_BAD_REQUEST_LINE);
		}
		p->reason = IG_R_REQUEST;
		return;
	}
	p->reason = IG_R_REQUEST;

	if (i + 11 < tavail) {
		p->hdr_off = (__u16)(p->t_off + i + 11);
		p->hdr_len = (__u16)(tavail - (i + 11));
	}
}

/* Stage 2: the rest of the target and the version. On success sets hdr_off/hdr_len to the
 * header block that follows (for ref_find_priority). */
IG_INLINE void ref_scan_target(const __u8 *data, const __u8 *end, IG_CFG *cfg, struct ig_parse *p)
{
	ref_check_target_end(data, end, cfg, p, ref_scan_target_words(data, end, p));
}

/* Judges the payload of a non-SYN service segment (all stages; the BPF program runs stages 2
 * and 3 as separate subprograms so the verifier checks each once). known_first: the program
 * knows this is the connection's first data segment (it saw the SYN), so it must start a
 * request. */
IG_INLINE void ref_classify_payload(const __u8 *data, const __u8 *end, IG_CFG *cfg,
				   struct ig_parse *p, int known_first)
{
	if (!ref_classify_start(data, end, cfg, p, known_first))
		return;
	ref_scan_target(data, end, cfg, p);
	if (p->reason == IG_R_REQUEST && p->hdr_len && cfg->priority_header &&
	    p->cls == IG_CLASS_NONE)
		p->cls = ref_find_priority(data, end, p->hdr_off, p->hdr_len);
}

// clang-format on

}  // namespace infergate::xdp::ref
