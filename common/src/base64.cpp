#include "conduit/common/base64.h"

#include <openssl/evp.h>

#include <algorithm>
#include <limits>
#include <memory>

namespace conduit {

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');  // EVP_EncodeBlock writes a NUL after
  const int n =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(std::max(n, 0)));
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  // OpenSSL's decoder skips line breaks but not other blanks, and knows only the standard alphabet: blanks
  // are dropped and the URL-safe letters mapped first.
  std::string in;
  in.reserve(text.size());
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\r') continue;
    in.push_back(c == '-' ? '+' : c == '_' ? '/' : c);
  }
  if (in.size() > static_cast<std::size_t>(std::numeric_limits<int>::max() / 2))
    return make_error(ErrorCode::InvalidArgument, "base64 text too long");
  std::unique_ptr<EVP_ENCODE_CTX, decltype(&EVP_ENCODE_CTX_free)> ctx(EVP_ENCODE_CTX_new(),
                                                                      &EVP_ENCODE_CTX_free);
  if (!ctx) return make_error(ErrorCode::ResourceExhausted, "out of memory decoding base64");
  std::string out(in.size() / 4 * 3 + 3, '\0');
  auto* to = reinterpret_cast<unsigned char*>(out.data());
  int n = 0, tail = 0;
  EVP_DecodeInit(ctx.get());
  if (EVP_DecodeUpdate(ctx.get(), to, &n, reinterpret_cast<const unsigned char*>(in.data()),
                       static_cast<int>(in.size())) < 0 ||
      EVP_DecodeFinal(ctx.get(), to + n, &tail) < 0) {
    return make_error(ErrorCode::InvalidArgument,
                      "invalid base64: not groups of four characters of A-Z a-z 0-9 + / with = padding");
  }
  out.resize(static_cast<std::size_t>(n + tail));
  return out;
}

}  // namespace conduit
