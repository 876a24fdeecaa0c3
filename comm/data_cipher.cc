#include "comm/data_cipher.h"

#include <cstring>
#include <string>

#include <gcrypt.h>
#include <sodium.h>
#include <spdlog/spdlog.h>

namespace rill::comm {
namespace {

constexpr std::string_view kLinkKeyPrefix = "rill-data-v1/";

// The GCM nonce of message `counter`: the counter, little-endian, then
// zeros (96 bits, GCM's native size).
std::array<unsigned char, 12> nonce(uint64_t counter) {
  std::array<unsigned char, 12> iv{};
  for (int i = 0; i < 8; ++i) iv[i] = static_cast<unsigned char>(counter >> (8 * i));
  return iv;
}

// libgcrypt is ready once per process (no secure memory: the keys live in
// ordinary memory, as the rest of the process's data does).
bool gcrypt_ready() {
  static const bool ready = [] {
    if (gcry_check_version(GCRYPT_VERSION) == nullptr) return false;
    gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
    gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
    return true;
  }();
  return ready;
}

gcry_cipher_hd_t keyed_handle(const std::array<uint8_t, 32>& key) {
  gcry_cipher_hd_t handle = nullptr;
  if (!gcrypt_ready() || gcry_cipher_open(&handle, GCRY_CIPHER_AES256, GCRY_CIPHER_MODE_GCM, 0) != 0) return nullptr;
  if (gcry_cipher_setkey(handle, key.data(), key.size()) != 0) {
    gcry_cipher_close(handle);
    return nullptr;
  }
  return handle;
}

// Starts message `counter`: its nonce, then the clear bytes the tag covers.
bool begin(gcry_cipher_hd_t handle, uint64_t counter, std::span<const std::byte> clear) {
  const auto iv = nonce(counter);
  return gcry_cipher_setiv(handle, iv.data(), iv.size()) == 0 &&
         gcry_cipher_authenticate(handle, clear.data(), clear.size()) == 0;
}

}  // namespace

struct GcmHandle {
  gcry_cipher_hd_t handle = nullptr;  // null: the cipher could not be set up (every seal and open fails)
  explicit GcmHandle(const std::array<uint8_t, 32>& key) : handle(keyed_handle(key)) {}
  ~GcmHandle() { gcry_cipher_close(handle); }
};

SessionId new_session_id() {
  if (sodium_init() < 0) spdlog::critical("libsodium failed to initialise");
  SessionId id;
  randombytes_buf(id.data(), id.size());
  return id;
}

std::array<uint8_t, 32> link_key(const ClusterKey& key, int from, int to, const SessionId& from_session,
                                 const SessionId& to_session) {
  std::string message(kLinkKeyPrefix);
  for (int rank : {from, to})
    for (int i = 0; i < 4; ++i) message.push_back(static_cast<char>(static_cast<uint32_t>(rank) >> (8 * i)));
  message.append(reinterpret_cast<const char*>(from_session.data()), from_session.size());
  message.append(reinterpret_cast<const char*>(to_session.data()), to_session.size());
  if (sodium_init() < 0) spdlog::critical("libsodium failed to initialise");
  std::array<uint8_t, 32> out{};
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                     key.secret.data(), key.secret.size());
  return out;
}

Sealer::Sealer(const std::array<uint8_t, 32>& key) : gcm_(std::make_unique<GcmHandle>(key)) {}
Sealer::~Sealer() = default;

bool Sealer::seal(uint64_t counter, std::span<const std::byte> clear, std::span<const std::byte> a, std::byte* a_out,
                  std::span<const std::byte> b, std::byte* b_out, uint8_t tag[kSealTagBytes]) {
  gcry_cipher_hd_t handle = gcm_->handle;
  if (handle == nullptr || last_ == UINT64_MAX || counter != last_ + 1) return false;
  // Header then body as one stream (GCM takes pieces of any length).
  if (!begin(handle, counter, clear) ||
      (!a.empty() && gcry_cipher_encrypt(handle, a_out, a.size(), a.data(), a.size()) != 0) ||
      (!b.empty() && gcry_cipher_encrypt(handle, b_out, b.size(), b.data(), b.size()) != 0) ||
      gcry_cipher_gettag(handle, tag, kSealTagBytes) != 0)
    return false;
  last_ = counter;
  return true;
}

Opener::Opener(const std::array<uint8_t, 32>& key) : gcm_(std::make_unique<GcmHandle>(key)) {}
Opener::~Opener() = default;

bool Opener::open(std::span<const std::byte> clear, uint64_t counter, std::span<std::byte> a, std::span<std::byte> b,
                  const uint8_t tag[kSealTagBytes]) {
  gcry_cipher_hd_t handle = gcm_->handle;
  if (handle == nullptr || counter <= last_) return false;
  if (!begin(handle, counter, clear) ||
      (!a.empty() && gcry_cipher_decrypt(handle, a.data(), a.size(), nullptr, 0) != 0) ||
      (!b.empty() && gcry_cipher_decrypt(handle, b.data(), b.size(), nullptr, 0) != 0) ||
      gcry_cipher_checktag(handle, tag, kSealTagBytes) != 0)
    return false;
  last_ = counter;
  return true;
}

}  // namespace rill::comm
