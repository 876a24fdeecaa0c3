#include "comm/data_cipher.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include <openssl/evp.h>
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

EVP_CIPHER_CTX* keyed_context(const std::array<uint8_t, 32>& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) return nullptr;
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    return nullptr;
  }
  return ctx;
}

// Runs `in` through the context into `out` in pieces OpenSSL's int lengths
// can hold.
bool update(EVP_CIPHER_CTX* ctx, bool encrypt, const std::byte* in, std::byte* out, size_t size) {
  constexpr size_t kPiece = size_t{1} << 30;
  for (size_t done = 0; done < size;) {
    const int n = static_cast<int>(std::min(kPiece, size - done));
    int written = 0;
    auto* o = reinterpret_cast<unsigned char*>(out + done);
    const auto* i = reinterpret_cast<const unsigned char*>(in + done);
    const int ok = encrypt ? EVP_EncryptUpdate(ctx, o, &written, i, n) : EVP_DecryptUpdate(ctx, o, &written, i, n);
    if (ok != 1 || written != n) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

bool add_clear(EVP_CIPHER_CTX* ctx, bool encrypt, std::span<const std::byte> clear) {
  int written = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(clear.data());
  const int n = static_cast<int>(clear.size());
  return (encrypt ? EVP_EncryptUpdate(ctx, nullptr, &written, p, n) : EVP_DecryptUpdate(ctx, nullptr, &written, p, n)) ==
         1;
}

}  // namespace

struct Sealer::Context {
  EVP_CIPHER_CTX* ctx = nullptr;
  ~Context() { EVP_CIPHER_CTX_free(ctx); }
};
struct Opener::Context {
  EVP_CIPHER_CTX* ctx = nullptr;
  ~Context() { EVP_CIPHER_CTX_free(ctx); }
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

Sealer::Sealer(const std::array<uint8_t, 32>& key) : context_(std::make_unique<Context>()) {
  context_->ctx = keyed_context(key, true);
}
Sealer::~Sealer() = default;

bool Sealer::seal(uint64_t counter, std::span<const std::byte> clear, std::span<const std::byte> a, std::byte* a_out,
                  std::span<const std::byte> b, std::byte* b_out, uint8_t tag[kSealTagBytes]) {
  EVP_CIPHER_CTX* ctx = context_->ctx;
  if (ctx == nullptr || last_ == UINT64_MAX || counter != last_ + 1) return false;
  const auto iv = nonce(counter);
  int final_bytes = 0;
  if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1 || !add_clear(ctx, true, clear) ||
      !update(ctx, true, a.data(), a_out, a.size()) || !update(ctx, true, b.data(), b_out, b.size()) ||
      EVP_EncryptFinal_ex(ctx, nullptr, &final_bytes) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSealTagBytes), tag) != 1)
    return false;
  last_ = counter;
  return true;
}

Opener::Opener(const std::array<uint8_t, 32>& key) : context_(std::make_unique<Context>()) {
  context_->ctx = keyed_context(key, false);
}
Opener::~Opener() = default;

bool Opener::open(std::span<const std::byte> clear, uint64_t counter, std::span<std::byte> a, std::span<std::byte> b,
                  const uint8_t tag[kSealTagBytes]) {
  EVP_CIPHER_CTX* ctx = context_->ctx;
  if (ctx == nullptr || counter <= last_) return false;
  const auto iv = nonce(counter);
  uint8_t expected[kSealTagBytes];
  std::memcpy(expected, tag, kSealTagBytes);
  int final_bytes = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv.data()) != 1 || !add_clear(ctx, false, clear) ||
      !update(ctx, false, a.data(), a.data(), a.size()) || !update(ctx, false, b.data(), b.data(), b.size()) ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kSealTagBytes), expected) != 1 ||
      EVP_DecryptFinal_ex(ctx, nullptr, &final_bytes) != 1)
    return false;
  last_ = counter;
  return true;
}

}  // namespace rill::comm
