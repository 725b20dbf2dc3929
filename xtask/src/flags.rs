//! A task's command line, read flag by flag: each flag's value, and whole
//! numbers, with the flag's name and the task's usage in every error.

/// The flags still to read.
pub struct Flags<'a> {
    args: std::slice::Iter<'a, String>,
    usage: &'static str,
}

impl<'a> Flags<'a> {
    /// Reads `args`; `usage` ends every error about a missing value.
    pub fn new(args: &'a [String], usage: &'static str) -> Flags<'a> {
        Flags { args: args.iter(), usage }
    }

    /// Whether `args` ask for help; if so, prints `usage`.
    pub fn help(args: &[String], usage: &str) -> bool {
        let asked = args.iter().any(|arg| arg == "-h" || arg == "--help");
        if asked {
            println!("{usage}");
        }
        asked
    }

    /// The next flag.
    pub fn next_flag(&mut self) -> Option<&'a String> {
        self.args.next()
    }

    /// The value that follows flag `name`.
    pub fn value(&mut self, name: &str) -> Result<String, String> {
        self.args.next().cloned().ok_or_else(|| format!("{name} needs a value\n\n{}", self.usage))
    }

    /// Every value that follows flag `name` up to the next flag: at least
    /// one.
    pub fn values(&mut self, name: &str) -> Result<Vec<String>, String> {
        let mut values = Vec::new();
        while let Some(next) = self.args.as_slice().first()
            && !next.starts_with("--")
        {
            values.push(next.clone());
            self.args.next();
        }
        if values.is_empty() {
            return Err(format!("{name} needs at least one value\n\n{}", self.usage));
        }
        Ok(values)
    }

    /// The whole number that follows flag `name`.
    pub fn number(&mut self, name: &str) -> Result<u64, String> {
        let text = self.value(name)?;
        text.parse::<u64>().map_err(|_| format!("{name} takes a whole number, not {text:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::Flags;

    #[test]
    fn values_and_numbers_name_their_flag() {
        let args: Vec<String> = ["--seeds", "4", "--jobs", "x", "--out"].map(String::from).to_vec();
        let mut flags = Flags::new(&args, "usage: test");
        assert_eq!(flags.next_flag().map(String::as_str), Some("--seeds"));
        assert_eq!(flags.number("--seeds"), Ok(4));
        assert_eq!(flags.next_flag().map(String::as_str), Some("--jobs"));
        assert_eq!(flags.number("--jobs"), Err("--jobs takes a whole number, not \"x\"".into()));
        assert_eq!(flags.next_flag().map(String::as_str), Some("--out"));
        assert_eq!(flags.value("--out"), Err("--out needs a value\n\nusage: test".into()));
        assert_eq!(flags.next_flag(), None);
    }

    #[test]
    fn a_list_of_values_ends_at_the_next_flag() {
        let args: Vec<String> = ["--merge", "a.json", "b.json", "--json", "--merge"].map(String::from).to_vec();
        let mut flags = Flags::new(&args, "usage: test");
        assert_eq!(flags.next_flag().map(String::as_str), Some("--merge"));
        assert_eq!(flags.values("--merge"), Ok(vec!["a.json".to_string(), "b.json".to_string()]));
        assert_eq!(flags.next_flag().map(String::as_str), Some("--json"));
        assert_eq!(flags.next_flag().map(String::as_str), Some("--merge"));
        assert_eq!(flags.values("--merge"), Err("--merge needs at least one value\n\nusage: test".into()));
    }
}
