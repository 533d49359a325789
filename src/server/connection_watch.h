// ConnectionWatch: whether the client of a request still waits for its answer. The HTTP library
// (cpp-httplib 0.11) does not hand a handler its socket, and finds out that a client left only
// when a write fails, which a whole (not streamed) answer attempts only at its end. So the watch
// finds the socket by its two ends among this process's descriptors, once, and then asks the
// kernel whether the peer has closed it (POLLRDHUP: its FIN or RST has arrived).
#pragma once

#include <string>

namespace leoam::server {

class ConnectionWatch {
 public:
  // The socket whose local end is local_addr:local_port and remote end remote_addr:remote_port
  // (numeric, as the library reports them). A watch that finds none never reports the peer gone.
  static ConnectionWatch find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                              int remote_port);

  bool found() const { return fd_ >= 0; }
  // True once the peer has closed or reset its end of the connection.
  bool peer_gone() const;

 private:
  int fd_ = -1;
};

}  // namespace leoam::server
