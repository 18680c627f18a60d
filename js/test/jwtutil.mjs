// HS256 JSON Web Tokens made by hand with node:crypto (not with the
// server's JWT library), for the tests of token refresh; the browser tests
// make theirs with WebCrypto in the page.
import { createHash, createHmac } from "node:crypto";

export const JWT_SECRET = "js-jwt-test-secret-0123456789abcdef";

const b64 = (s) => Buffer.from(s).toString("base64url");

/** An HS256 token with key id "k" and the given claims. */
export function mintHS256(claims, secret = JWT_SECRET) {
  const input = b64(JSON.stringify({ alg: "HS256", typ: "JWT", kid: "k" })) + "." + b64(JSON.stringify(claims));
  return input + "." + createHmac("sha256", secret).update(input).digest("base64url");
}

/** A config with [auth.jwt] (key "k", no leeway, the given grace) and a static publisher token. */
export function jwtConfig(publisherToken, grace = "1s") {
  const hash = createHash("sha256").update(publisherToken).digest("hex");
  return `
[auth]
[[auth.roles]]
name = "pub"
publish = [">"]
subscribe = [">"]
[[auth.tokens]]
name = "publisher"
hash = "sha256:${hash}"
role = "pub"
[auth.jwt]
leeway = "0s"
grace = "${grace}"
[[auth.jwt.keys]]
kid = "k"
alg = "HS256"
secret = "${JWT_SECRET}"
`;
}
