#pragma once
// A PacketDevice a reactor thread can sleep on and kick: what AfXdpReactor needs beyond the
// burst interface. The XSK device implements it; a test double can too.
//
// Threading: like PacketDevice, one reactor thread; no method is thread-safe.

#include "dataplane/packet_io.h"

namespace infergate::dataplane {

class PollableDevice : public PacketDevice {
 public:
  // A descriptor that becomes readable (POLLIN) when received frames wait; -1 when none.
  virtual int fd() const = 0;
  // need_wakeup: kicks the kernel only where a ring asks (the fill ring for rx, the tx ring
  // while transmit descriptors are still queued). Cheap when nothing is asked.
  virtual void kick() = 0;
  // Transmit descriptors the kernel has not consumed yet (copy mode sends them in the kick
  // system call, a bounded number per call): the reactor must not sleep while this is true.
  virtual bool txPending() const = 0;
  // Busy polling: one non-blocking receive system call that drives the driver's NAPI
  // (SO_PREFER_BUSY_POLL). Only meaningful when the device was opened with busy polling.
  virtual void busyPoll() = 0;
};

}  // namespace infergate::dataplane
