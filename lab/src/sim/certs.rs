//! Simulation test data: a self-signed P-256 test certificate and its key, made once with
//! `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650
//! -subj /CN=cluster-proxy-addon-user -addext "subjectAltName=DNS:localhost,IP:127.0.0.1,DNS:cluster-proxy-addon-user"`.
//! It protects nothing: it exists so that the simulated `cluster-proxy-user-serving-cert` holds a PEM
//! bundle that parses as X.509, like the real one (OCM-FACTS §6.1).

/// `tls.crt` of the simulated serving certificate (also used as the simulated clusters' CA).
pub const SERVING_CERT_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIB0jCCAXmgAwIBAgIUOQIXbNtMJFP2w49tgR/g7oLqEGowCgYIKoZIzj0EAwIw
IzEhMB8GA1UEAwwYY2x1c3Rlci1wcm94eS1hZGRvbi11c2VyMB4XDTI2MTEyMjA0
NDM1M1oXDTM2MTExOTA0NDM1M1owIzEhMB8GA1UEAwwYY2x1c3Rlci1wcm94eS1h
ZGRvbi11c2VyMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEFGzR/zH/59TS/LIW
/ZaEM2xLiHhj3w0u/MO3MSG1N/3OlSmrHzDfEBq3jX3DQ4xMSdMgG9mCd6xCEPTQ
4o7qnaOBijCBhzAdBgNVHQ4EFgQUL6C8+roSlWkaJDsLQSZMaWCyjWswHwYDVR0j
BBgwFoAUL6C8+roSlWkaJDsLQSZMaWCyjWswDwYDVR0TAQH/BAUwAwEB/zA0BgNV
HREELTArgglsb2NhbGhvc3SHBH8AAAGCGGNsdXN0ZXItcHJveHktYWRkb24tdXNl
cjAKBggqhkjOPQQDAgNHADBEAiB7Z7HHTllTqKJyseOQULRwQcXoXf+7KO00FxSA
ObleAgIgQo+ydleWyFFvauSlmn7yaZfpU+g4++f2IxMpJ1o9zEA=
-----END CERTIFICATE-----
";

/// `tls.key` of the simulated serving certificate (test data, not a secret).
pub const SERVING_KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg8SUeA11aW45ZO1K0
Wro5mlInDJHBWkZ+8ULc4GSMfcWhRANCAAQUbNH/Mf/n1NL8shb9loQzbEuIeGPf
DS78w7cxIbU3/c6VKasfMN8QGreNfcNDjExJ0yAb2YJ3rEIQ9NDijuqd
-----END PRIVATE KEY-----
";
