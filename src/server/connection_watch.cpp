#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace leoam::server {
namespace {

// The numeric address and port of a socket address.
bool numeric(const sockaddr_storage& a, std::string& addr, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    if (inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof(buf)) == nullptr) return false;
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof(buf)) == nullptr) return false;
    port = ntohs(v6->sin6_port);
  } else {
    return false;
  }
  addr = buf;
  return true;
}

bool end_is(int fd, bool peer, const std::string& want_addr, int want_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::string addr;
  int port = -1;
  return rc == 0 && numeric(a, addr, port) && port == want_port && addr == want_addr;
}

}  // namespace

ConnectionWatch ConnectionWatch::find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                                      int remote_port) {
  ConnectionWatch w;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return w;
  for (dirent* e = readdir(dir); e != nullptr; e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (end_is(static_cast<int>(fd), true, remote_addr, remote_port) &&
        end_is(static_cast<int>(fd), false, local_addr, local_port)) {
      w.fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return w;
}

bool ConnectionWatch::peer_gone() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace leoam::server
