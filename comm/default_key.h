// The key a user's agents and clients use when none is named: made on first
// use, so a cluster of one machine is never open to its other users by
// default (as Jupyter's token on localhost).
//
// Which key a command uses:
//  1. the file $RILL_KEY_FILE names (`--key FILE` sets it);
//  2. none under $RILL_INSECURE=1 (`--insecure` sets it): plain
//     connections, open to whoever reaches the ports;
//  3. the default key file, $XDG_CONFIG_HOME/rill/cluster.key (else
//     ~/.config/rill/cluster.key), if it exists;
//  4. an agent on a loopback address makes that file (its folder 0700, the
//     file 0600; agents starting at once make one between them); a client
//     finds none and connects without a key (and is refused by keyed
//     agents). An agent beyond loopback does not make one: every machine
//     needs the same key, so it is made once (`rill keygen`) and copied.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "comm/cluster_key.h"

namespace rill::comm {

inline constexpr const char* kInsecureEnv = "RILL_INSECURE";
// Whether $RILL_INSECURE asks for no key.
bool insecure_from_environment();

// Where the default key file is; an error when neither $XDG_CONFIG_HOME nor
// $HOME is set.
StatusOr<std::string> default_key_path();

// Makes the default key's folder if it is missing (0700) and checks it is
// this user's alone; returns the default key file's path.
StatusOr<std::string> prepare_default_key_folder();

// The default key if its file exists (nullptr if not); errors name the file
// (unreadable, open to others, in a folder others may write).
StatusOr<std::shared_ptr<const ClusterKey>> read_default_key();

// The default key, made now if there is none; `made` says whether this call
// made it.
StatusOr<std::shared_ptr<const ClusterKey>> default_key_made_on_first_use(bool* made);

// The key of an agent (rules 1-4 above; `loopback`: the agent listens on a
// loopback address): nullptr when it runs without one.
StatusOr<std::shared_ptr<const ClusterKey>> agent_key(bool loopback);

}  // namespace rill::comm
