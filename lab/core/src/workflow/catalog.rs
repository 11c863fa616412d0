//! What the workflow loader knows of actions: their names and inputs, through [`Catalog`]. The one
//! registry of actions (`actions::Registry`) implements it, so the workflow layer checks a step's `uses:`
//! and `with:` without depending on the actions that run them.

/// One input of an action (`with:` key).
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub name: &'static str,
    pub required: bool,
    pub doc: &'static str,
}

/// The actions a workflow may use, as the loader sees them.
pub trait Catalog {
    /// The inputs of the action named `name`, or `None` when there is no such action.
    fn inputs(&self, name: &str) -> Option<&'static [Input]>;
    /// Every action's name (for "did you mean").
    fn names(&self) -> Vec<&'static str>;
}
