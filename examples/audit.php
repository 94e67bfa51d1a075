<?php
// Sends one batch of audit entries to nachtwacht (POST /api/audit) and prints the
// answer, with a receipt per entry, on stdout. Needs PHP ≥ 7.4 with the curl and json
// extensions. docs/integration.md explains it.
//
//   NACHTWACHT_URL=https://nachtwacht.intern.example APP_SECRET=… php examples/audit.php batch.json
//   … | php examples/audit.php                  # the batch on stdin
//
// In your application, require this file and call nachtwacht_send_audit() with your
// entries; give every entry a `sleutel` (your own event id): a batch sent twice is then
// stored once, and the second time answered with the same receipts. A batch with an entry
// without one is sent again only when the failed attempt certainly stored nothing (the
// name did not resolve or the connection was refused, or nachtwacht's own 503 says so in
// its `nachtwacht-opgeslagen: nee` header); after any other failure it may have been
// stored, and is not repeated.
//
// Environment: NACHTWACHT_URL and APP_SECRET (required); NACHTWACHT_MAX_ATTEMPTS (5),
// NACHTWACHT_BACKOFF_MS (500: the first wait, doubled each time, with jitter),
// NACHTWACHT_MAX_DELAY_MS (60000: a Retry-After above it ends the retries).
//
// Exit: 0 stored (or already stored); 1 refused (a 3xx, or a 4xx other than 408/429: fix
// the batch or the URL; the server's message is on stderr); 2 usage; 3 perhaps stored
// (entries without a sleutel, no certain answer): do not send it again as it is; 75 gave
// up for now (no answer, 408, 429, 5xx, an answer that is not nachtwacht's): send the
// same batch again later. The secret comes from the environment (getenv) and only goes
// into a request header (CURLOPT_HTTPHEADER), never onto a command line.

declare(strict_types=1);

/** A final answer (a 3xx, or a 4xx other than 408/429): sending the same batch again will not help. */
final class NachtwachtRefused extends RuntimeException
{
    public int $status;
    /** False when this client refused the batch itself, before sending (over NACHTWACHT_MAX_BATCH_BYTES): no answer came. */
    public bool $sent;

    public function __construct(int $status, string $error, bool $sent = true)
    {
        parent::__construct($sent ? "HTTP $status: $error" : "by this client, before sending ($status, no answer from the service): $error");
        $this->status = $status;
        $this->sent = $sent;
    }
}

/** No success after the allowed attempts, or the server asks to wait longer than allowed. */
final class NachtwachtGaveUp extends RuntimeException
{
}

/** No certain answer for a batch with entries without a sleutel: it may have been stored, so it is not sent again. */
final class NachtwachtMaybeStored extends RuntimeException
{
}

/**
 * The largest batch POST /api/audit takes, in bytes: the service's MAX_BATCH_BYTES
 * (src/ingest/audit.ts). A larger one is refused before sending: the service would close
 * the connection on it unread, which looks like a lost answer, not like the 413 it is.
 */
const NACHTWACHT_MAX_BATCH_BYTES = 1048576;
/** What the service takes as a secret (src/config.ts). */
const NACHTWACHT_SECRET_RULE = "APP_SECRET must be 32 to 1024 printable ASCII characters, without spaces or line breaks (as the service requires)";

function nachtwacht_secret_ok(string $secret): bool
{
    return preg_match('/^[\x21-\x7e]{32,1024}$/D', $secret) === 1;
}

function nachtwacht_retry_after_ms(?string $value): ?int
{
    if ($value === null) {
        return null;
    }
    $value = trim($value);
    if (preg_match('/^[0-9]+$/', $value) === 1) {
        return (int) $value * 1000;
    }
    $at = strtotime($value);
    return $at === false ? null : max(0, ($at - time()) * 1000);
}

/** A refusal that sending the same batch again will not change: a redirect, or a 4xx other than 408/429. */
function nachtwacht_final(int $status): bool
{
    return $status >= 300 && $status < 500 && $status !== 408 && $status !== 429;
}

/** nachtwacht's answer (it has the receipts), or null. */
function nachtwacht_answer_of(string $body): ?array
{
    $answer = json_decode($body, true);
    return is_array($answer) && isset($answer['ontvangstbewijzen']) && is_array($answer['ontvangstbewijzen']) ? $answer : null;
}

function nachtwacht_error_of(string $body, int $status): string
{
    $decoded = json_decode($body, true);
    if (is_array($decoded) && isset($decoded['error']) && is_string($decoded['error'])) {
        return $decoded['error'];
    }
    $short = trim(substr($body, 0, 300));
    return $short === '' ? "HTTP $status without a body" : $short;
}

/**
 * POSTs the entries as one batch and returns the answer as an array
 * (opgeslagen, alBekend, ontvangstbewijzen). Retries (the same bytes, so the same
 * sleutels) after a connection error, a timeout, 408, 429, 5xx and an answer that is
 * not nachtwacht's, waiting
 * 2^(attempt−1) × backoff_ms with jitter, or the server's Retry-After plus a random
 * part of that; a batch with an entry without a sleutel only when nothing was stored.
 * Throws InvalidArgumentException for a secret the service would not take,
 * NachtwachtRefused for a final answer (a batch over NACHTWACHT_MAX_BATCH_BYTES: 413
 * without sending), NachtwachtMaybeStored when a batch without
 * sleutels may have been stored, NachtwachtGaveUp otherwise.
 *
 * `details` must encode as a JSON object: an empty PHP array [] encodes as a JSON array
 * (400); leave it out, or pass (object) [] or an associative array.
 *
 * @param list<array<string, mixed>|object> $entries
 * @return array{opgeslagen: int, alBekend: int, ontvangstbewijzen: list<array{tenantId: int, seq: int, id: int, hash: string}>}
 */
function nachtwacht_send_audit(string $baseUrl, string $secret, array $entries, int $maxAttempts = 5, int $backoffMs = 500, int $maxDelayMs = 60000, ?callable $log = null): array
{
    if (!nachtwacht_secret_ok($secret)) {
        throw new InvalidArgumentException(NACHTWACHT_SECRET_RULE); // never the value itself
    }
    $keyed = true;
    foreach ($entries as $e) {
        $sleutel = is_array($e) ? ($e['sleutel'] ?? null) : (is_object($e) ? ($e->sleutel ?? null) : null);
        $keyed = $keyed && is_string($sleutel);
    }
    // Encoded once: every attempt sends the same bytes, so the same sleutels.
    $payload = json_encode(['entries' => $entries], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR);
    if (strlen($payload) > NACHTWACHT_MAX_BATCH_BYTES) {
        throw new NachtwachtRefused(413, 'the batch is ' . strlen($payload) . ' bytes, more than the ' . NACHTWACHT_MAX_BATCH_BYTES . ' bytes the service takes; nothing sent, nothing stored: split it', false);
    }
    $url = rtrim($baseUrl, '/') . '/api/audit';
    for ($attempt = 1; ; $attempt++) {
        $retryAfter = null;
        $headers = [];
        $ch = curl_init($url);
        curl_setopt_array($ch, [
            CURLOPT_POST => true,
            CURLOPT_POSTFIELDS => $payload,
            CURLOPT_HTTPHEADER => ["Authorization: Bearer $secret", 'Content-Type: application/json', 'Accept: application/json'],
            CURLOPT_RETURNTRANSFER => true,
            // The service never redirects; following one would take the header along.
            CURLOPT_FOLLOWLOCATION => false,
            CURLOPT_PROTOCOLS => CURLPROTO_HTTP | CURLPROTO_HTTPS,
            CURLOPT_CONNECTTIMEOUT => 10,
            CURLOPT_TIMEOUT => 60,
            CURLOPT_HEADERFUNCTION => function ($ch, string $line) use (&$headers): int {
                // A new status line (after a 100 Continue): only the final answer's headers count.
                if (strncmp($line, 'HTTP/', 5) === 0) {
                    $headers = [];
                }
                $parts = explode(':', $line, 2);
                if (count($parts) === 2) {
                    $headers[strtolower(trim($parts[0]))] = trim($parts[1]);
                }
                return strlen($line);
            },
        ]);
        $body = curl_exec($ch);
        $status = (int) curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
        $curlError = curl_error($ch);
        $curlErrno = curl_errno($ch);
        unset($ch); // frees the handle (curl_close() is a no-op since PHP 8 and deprecated in 8.5)

        $nothingStored = false;
        if ($body === false || $status === 0) {
            $reason = "no answer: $curlError";
            // Not resolved or not connected: the request never left this machine.
            $nothingStored = in_array($curlErrno, [CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT], true);
        } elseif (nachtwacht_final($status)) {
            throw new NachtwachtRefused($status, nachtwacht_error_of((string) $body, $status));
        } elseif ($status >= 200 && $status < 300) {
            $answer = nachtwacht_answer_of((string) $body);
            if ($answer !== null) {
                return $answer;
            }
            // A 2xx from something in between (a login page): nothing certain was stored.
            $reason = "HTTP $status, but not nachtwacht's answer: " . trim(substr((string) $body, 0, 300));
        } else {
            $reason = "HTTP $status: " . nachtwacht_error_of((string) $body, $status);
            $retryAfter = nachtwacht_retry_after_ms($headers['retry-after'] ?? null);
            // nachtwacht's own 503 carries it when nothing of the request was stored (a proxy's 503 does not).
            $nothingStored = $status === 503 && ($headers['nachtwacht-opgeslagen'] ?? '') === 'nee';
        }

        if (!$keyed && !$nothingStored) {
            throw new NachtwachtMaybeStored("$reason; perhaps stored, and entries without a sleutel are not sent again (they could be stored twice)");
        }

        if ($attempt >= $maxAttempts) {
            throw new NachtwachtGaveUp("gave up after $attempt attempts: $reason");
        }
        if ($retryAfter !== null && $retryAfter > $maxDelayMs) {
            throw new NachtwachtGaveUp("$reason; the server asks to wait " . ($retryAfter / 1000) . ' s (Retry-After), more than max_delay_ms');
        }
        $backoff = min($maxDelayMs, $backoffMs * 2 ** ($attempt - 1));
        // After a Retry-After: that plus a random part of the backoff, so clients refused at once do not all return at once.
        $delay = $retryAfter === null
            ? intdiv($backoff, 2) + random_int(0, intdiv($backoff, 2))
            : max($retryAfter, min($maxDelayMs, $retryAfter + random_int(0, $backoff)));
        if ($log !== null) {
            $log("attempt $attempt: $reason; again in $delay ms");
        }
        usleep($delay * 1000);
    }
}

function nachtwacht_main(array $argv): int
{
    $say = function (string $m): void {
        fwrite(STDERR, "audit.php: $m\n");
    };
    $baseUrl = getenv('NACHTWACHT_URL');
    $secret = getenv('APP_SECRET');
    if ($baseUrl === false || $baseUrl === '' || $secret === false || $secret === '') {
        $say('NACHTWACHT_URL and APP_SECRET must be set (in the environment, never as arguments)');
        return 2;
    }
    if (count($argv) > 2) {
        $say('usage: audit.php [BATCH.json | -]');
        return 2;
    }
    $file = count($argv) === 1 || $argv[1] === '-' ? 'php://stdin' : $argv[1];
    $text = @file_get_contents($file);
    // JSON objects stay objects (details {} must not become []): decode to stdClass.
    $batch = $text === false ? null : json_decode($text, false);
    if (!is_object($batch) || !isset($batch->entries) || !is_array($batch->entries)) {
        $say("cannot read the batch from $file");
        return 2;
    }
    if (!nachtwacht_secret_ok($secret)) {
        $say(NACHTWACHT_SECRET_RULE);
        return 2;
    }
    if (preg_match('#^https?://#i', $baseUrl) !== 1) {
        $say('NACHTWACHT_URL must start with http:// or https://');
        return 2;
    }
    $settings = [];
    foreach (['NACHTWACHT_MAX_ATTEMPTS' => 5, 'NACHTWACHT_BACKOFF_MS' => 500, 'NACHTWACHT_MAX_DELAY_MS' => 60000] as $name => $default) {
        $v = getenv($name);
        if ($v === false || $v === '') {
            $settings[$name] = $default;
        } elseif (preg_match('/^[0-9]{1,9}$/', $v) === 1) {
            $settings[$name] = (int) $v;
        } else {
            $say("$name takes a whole number");
            return 2;
        }
    }
    if ($settings['NACHTWACHT_MAX_ATTEMPTS'] < 1) {
        $say('NACHTWACHT_MAX_ATTEMPTS must be at least 1');
        return 2;
    }
    try {
        $answer = nachtwacht_send_audit(
            $baseUrl,
            $secret,
            $batch->entries,
            $settings['NACHTWACHT_MAX_ATTEMPTS'],
            $settings['NACHTWACHT_BACKOFF_MS'],
            $settings['NACHTWACHT_MAX_DELAY_MS'],
            $say
        );
    } catch (NachtwachtRefused $e) {
        $say('refused, ' . $e->getMessage());
        return 1;
    } catch (NachtwachtMaybeStored $e) {
        $say($e->getMessage() . '; check before sending it again, and give every entry a sleutel');
        return 3;
    } catch (NachtwachtGaveUp $e) {
        $say($e->getMessage() . '; send the same batch again later');
        return 75;
    }
    echo json_encode($answer, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
    return 0;
}

// Run as a script (not when required by your application).
if (PHP_SAPI === 'cli' && realpath($_SERVER['SCRIPT_FILENAME'] ?? '') === __FILE__) {
    exit(nachtwacht_main($argv));
}
