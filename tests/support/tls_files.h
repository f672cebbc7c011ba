// Throwaway certificates for tests, made with the openssl command line (scripts/install-deps.sh installs it):
// a CA, and leaf certificates it signs for given names and addresses, current or already expired.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace conduit::testing {

struct CertFiles {
  std::filesystem::path cert, key;
};

class TestCa {
 public:
  // Makes the CA's key and self-signed certificate in `dir` (created), named `name`.
  TestCa(std::filesystem::path dir, std::string name) : dir_(std::move(dir)), name_(std::move(name)) {
    std::filesystem::create_directories(dir_);
    ok_ = run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + q(key()) +
              " -out " + q(cert()) + " -days 2 -subj /CN=" + name_);
  }
  bool ok() const { return ok_; }
  std::filesystem::path cert() const { return dir_ / (name_ + ".crt"); }
  std::filesystem::path key() const { return dir_ / (name_ + ".key"); }

  // A leaf for `cn` with subjectAltName `san` (e.g. "DNS:node-a,IP:127.0.0.1"). `expired`: valid for one
  // day, ending yesterday (openssl ca with explicit dates: x509 -req cannot back-date).
  CertFiles issue(const std::string& cn, const std::string& san, bool expired = false) {
    const std::string stem = cn + (expired ? "-expired" : "") + "-" + std::to_string(++serial_);
    CertFiles out{dir_ / (stem + ".crt"), dir_ / (stem + ".key")};
    const auto csr = dir_ / (stem + ".csr");
    const auto ext = dir_ / (stem + ".ext");
    std::ofstream(ext) << "subjectAltName=" << san << "\nbasicConstraints=CA:FALSE\n"
                       << "extendedKeyUsage=serverAuth,clientAuth\n";
    ok_ = ok_ && run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " + q(out.key) +
                     " -out " + q(csr) + " -subj /CN=" + cn);
    if (!expired) {
      ok_ = ok_ && run("openssl x509 -req -in " + q(csr) + " -CA " + q(cert()) + " -CAkey " + q(key()) +
                       " -set_serial " + std::to_string(serial_) + " -days 1 -extfile " + q(ext) + " -out " +
                       q(out.cert));
      return out;
    }
    // openssl ca keeps a tiny database; its config names it and takes the dates as given.
    const auto db = dir_ / ("ca-db-" + stem);
    std::filesystem::create_directories(db);
    std::ofstream(db / "index.txt").close();
    std::ofstream(db / "serial") << "1000\n";
    const auto conf = dir_ / (stem + ".cnf");
    std::ofstream(conf)
        << "[ca]\ndefault_ca=test\n[test]\ndatabase=" << (db / "index.txt").string()
        << "\nserial=" << (db / "serial").string() << "\nnew_certs_dir=" << db.string()
        << "\ndefault_md=sha256\npolicy=any\ncopy_extensions=none\n[any]\ncommonName=supplied\n";
    ok_ =
        ok_ && run("openssl ca -batch -config " + q(conf) + " -cert " + q(cert()) + " -keyfile " + q(key()) +
                   " -in " + q(csr) + " -startdate 20200101000000Z -enddate 20200102000000Z -extfile " +
                   q(ext) + " -out " + q(out.cert));
    return out;
  }

 private:
  static std::string q(const std::filesystem::path& p) { return "'" + p.string() + "'"; }
  static bool run(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  }

  std::filesystem::path dir_;
  std::string name_;
  int serial_ = 0;
  bool ok_ = false;
};

}  // namespace conduit::testing
