// The client key: what a client of a cluster (`rill submit`, `status`,
// `stop`, `shutdown`, `token`, rill::Client) may hold instead of the cluster
// key: the clients' CURVE key pair, the master's public key and the HTTP
// token. Every part is derived one way from the cluster's secret, so none
// yields a node's key pair: a holder can submit, watch, stop and shut down
// jobs and read the dashboard, and cannot join as a node or speak on the
// data plane (the agents admit the clients' public key on the control port
// only, under the identity "client"). `rill keygen --client FILE` writes one.
//
// Pure functions and values, any thread.
#pragma once

#include <array>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "base/status.h"
#include "comm/cluster_key.h"

namespace rill::comm {

struct ClientKey {
  CurveKeyPair pair;                          // the clients' own
  std::array<uint8_t, 32> master_public{};    // node 0's server key
  std::string http_token;
  bool operator==(const ClientKey&) const = default;
};

// The client key of a cluster key (what its agents admit as "client").
ClientKey client_key_of(const ClusterKey& key);

// Writes `key` to `path` (0600, never through a link, replacing no file
// unless `overwrite`): a comment line, then "client" (the secret half of
// the pair; the public half follows from it), "master" and "token" lines.
Status write_client_key_file(const std::string& path, const ClientKey& key, bool overwrite = false);

// Whether `path` holds a client key (else, if anything, a cluster key).
bool is_client_key_file(const std::string& path);

// The client key of the file `path`, a client key file or a cluster key
// file (whose client key is derived). Errors name the file.
StatusOr<std::shared_ptr<const ClientKey>> client_key_from_file(const std::string& path);

// The client key of the file $RILL_KEY_FILE names, a client key file or a
// cluster key file (whose client key is derived); else, as
// key_from_environment, none under $RILL_INSECURE, or the client key of the
// user's default cluster key if it exists; or none (nullptr). Errors name
// the file and what is wrong with it.
StatusOr<std::shared_ptr<const ClientKey>> client_key_from_environment();

// Makes `socket` a CURVE client of the master as "client" (before connect).
void curve_client(zmq::socket_t& socket, const ClientKey& key);

}  // namespace rill::comm
