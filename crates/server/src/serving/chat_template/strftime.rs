//! `strftime_now(format)`, the global transformers gives chat templates: Python's
//! `datetime.now().strftime(format)` in the C locale (English names), on the server's clock in
//! UTC.

use std::time::{SystemTime, UNIX_EPOCH};

/// Where `strftime_now` reads the time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The system clock, in UTC.
    System,
    /// Always this instant (seconds since 1970-01-01 00:00:00 UTC): for tests and goldens.
    Fixed(i64),
}

impl Clock {
    fn now(self) -> i64 {
        match self {
            Clock::Fixed(t) => t,
            Clock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        }
    }
}

const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A civil date and time (proleptic Gregorian, UTC).
struct Civil {
    year: i64,
    /// 1..=12
    month: i64,
    /// 1..=31
    day: i64,
    /// 0 = Monday
    weekday: i64,
    /// 1..=366
    yday: i64,
    hour: i64,
    minute: i64,
    second: i64,
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil(t: i64) -> Civil {
    let days = t.div_euclid(86_400);
    let secs = t.rem_euclid(86_400);
    // Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    Civil {
        year,
        month,
        day,
        // 1970-01-01 was a Thursday (3 with Monday = 0).
        weekday: (days + 3).rem_euclid(7),
        yday: days - days_from_civil(year, 1, 1) + 1,
        hour: secs / 3600,
        minute: secs % 3600 / 60,
        second: secs % 60,
    }
}

/// `format` with the time of `clock`, as Python's `strftime` writes it; an unknown directive
/// is an error naming it.
pub fn strftime(clock: Clock, format: &str) -> Result<String, String> {
    let c = civil(clock.now());
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(ch) = chars.next() {
        if ch != '%' {
            out.push(ch);
            continue;
        }
        // glibc's `%-d`: no padding.
        let mut spec = chars.next();
        let pad = spec != Some('-');
        if !pad {
            spec = chars.next();
        }
        let num = |v: i64, width: usize| {
            if pad {
                format!("{v:0width$}")
            } else {
                v.to_string()
            }
        };
        let hour12 = if c.hour % 12 == 0 { 12 } else { c.hour % 12 };
        let piece = match spec {
            Some('Y') => c.year.to_string(),
            Some('y') => num(c.year.rem_euclid(100), 2),
            Some('m') => num(c.month, 2),
            Some('d') => num(c.day, 2),
            Some('e') => format!("{:>2}", c.day),
            Some('j') => num(c.yday, 3),
            Some('H') => num(c.hour, 2),
            Some('I') => num(hour12, 2),
            Some('M') => num(c.minute, 2),
            Some('S') => num(c.second, 2),
            Some('p') => (if c.hour < 12 { "AM" } else { "PM" }).to_string(),
            Some('B') => MONTHS[(c.month - 1) as usize].to_string(),
            Some('b') | Some('h') => MONTHS[(c.month - 1) as usize][..3].to_string(),
            Some('A') => DAYS[c.weekday as usize].to_string(),
            Some('a') => DAYS[c.weekday as usize][..3].to_string(),
            Some('u') => (c.weekday + 1).to_string(),
            Some('w') => ((c.weekday + 1) % 7).to_string(),
            Some('F') => format!("{}-{:02}-{:02}", c.year, c.month, c.day),
            Some('T') => format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second),
            Some('Z') => "UTC".to_string(),
            Some('z') => "+0000".to_string(),
            Some('%') => "%".to_string(),
            Some(other) => return Err(format!("strftime_now: unsupported directive %{other}")),
            None => return Err("strftime_now: the format ends with %".to_string()),
        };
        out.push_str(&piece);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_written_as_python_writes_them() {
        // 2026-02-03 04:05:06 UTC, a Tuesday.
        let t = Clock::Fixed(days_from_civil(2026, 2, 3) * 86_400 + 4 * 3600 + 5 * 60 + 6);
        let f = |s: &str| strftime(t, s).expect("formats");
        assert_eq!(f("%Y-%m-%d"), "2026-02-03");
        assert_eq!(f("%d %b %Y"), "03 Feb 2026");
        assert_eq!(f("%B %d, %Y"), "February 03, 2026");
        assert_eq!(
            f("%A %a %j %-d %e|%H:%M:%S %I%p %y %%"),
            "Tuesday Tue 034 3  3|04:05:06 04AM 26 %"
        );
        let leap = Clock::Fixed(days_from_civil(2024, 12, 31) * 86_400 + 23 * 3600);
        assert_eq!(
            strftime(leap, "%j %a %I %p").expect("formats"),
            "366 Tue 11 PM"
        );
        assert!(strftime(t, "%Q").is_err());
    }
}
