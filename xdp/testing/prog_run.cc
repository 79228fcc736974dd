#include "xdp/testing/prog_run.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include <cerrno>

namespace infergate::xdp::testing {

RunResult runXdp(int prog_fd, const std::vector<uint8_t>& packet, uint32_t repeat,
                 uint32_t meta_in) {
  RunResult r;
  std::vector<uint8_t> in(meta_in, 0);
  in.insert(in.end(), packet.begin(), packet.end());
  std::vector<uint8_t> out(in.size() + 256);
  xdp_md ctx_in{};
  xdp_md ctx_out{};
  ctx_in.data = meta_in;  // the metadata going in
  ctx_in.data_end = static_cast<uint32_t>(in.size());
  LIBBPF_OPTS(bpf_test_run_opts, opts);
  opts.data_in = in.data();
  opts.data_size_in = static_cast<uint32_t>(in.size());
  opts.data_out = out.data();
  opts.data_size_out = static_cast<uint32_t>(out.size());
  opts.ctx_in = &ctx_in;
  opts.ctx_size_in = sizeof(ctx_in);
  opts.ctx_out = &ctx_out;
  opts.ctx_size_out = sizeof(ctx_out);
  opts.repeat = repeat;
  int err = bpf_prog_test_run_opts(prog_fd, &opts);
  if (err) {
    r.err = err < 0 ? err : -errno;
    return r;
  }
  r.retval = opts.retval;
  r.duration_ns = opts.duration;
  uint32_t meta = ctx_out.data;  // data_out starts at data_meta
  uint32_t size = opts.data_size_out;
  if (meta > size) meta = size;
  r.meta.assign(out.begin(), out.begin() + meta);
  r.out.assign(out.begin() + meta, out.begin() + size);
  return r;
}

}  // namespace infergate::xdp::testing
