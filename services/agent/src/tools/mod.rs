//! The tools offered to the model and their dispatch. A failing tool call
//! never ends the turn: its error goes back to the model as the tool's
//! answer, so it can correct itself.

pub mod files;
pub mod page;
pub mod web;

use std::collections::HashMap;

use pedelec_common::Code;
use serde_json::{Value as Json, json};

use crate::error::AgentError;

pub const LIST_FILES: &str = "list_files";
pub const READ_FILE: &str = "read_file";
pub const WRITE_ASSET: &str = "write_asset";
pub const WEB_SEARCH: &str = "web_search";
const BUILT_IN: [&str; 4] = [LIST_FILES, READ_FILE, WRITE_ASSET, WEB_SEARCH];

/// How a name offered to the model is served.
#[derive(Clone, Debug, PartialEq)]
enum Route {
    ListFiles,
    ReadFile,
    WriteAsset,
    WebSearch,
    /// A page tool, by its manifest name.
    Page(String),
}

pub struct Toolset {
    files: files::Files,
    page: Option<page::PageTools>,
    web: Option<web::WebSearch>,
    routes: HashMap<String, Route>,
    definitions: Vec<Json>,
}

fn function(name: &str, description: &str, parameters: Json) -> Json {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}

impl Toolset {
    pub fn new(
        files: files::Files,
        page: Option<page::PageTools>,
        web: Option<web::WebSearch>,
    ) -> Self {
        let mut routes = HashMap::new();
        let mut definitions = vec![
            function(
                LIST_FILES,
                "List a folder of the workspace (the project folder on the user's machine). Paths are relative to the workspace; '.' is its root.",
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "Folder relative to the workspace, default '.'"}}}),
            ),
            function(
                READ_FILE,
                "Read a UTF-8 text file of the workspace (at most 256 KiB are returned). The path is relative to the workspace.",
                json!({"type": "object", "properties": {"path": {"type": "string", "description": "File path relative to the workspace"}}, "required": ["path"]}),
            ),
        ];
        routes.insert(LIST_FILES.to_string(), Route::ListFiles);
        routes.insert(READ_FILE.to_string(), Route::ReadFile);
        // Served in any case, so a model naming it without a thread reads
        // why it cannot write; offered only with the thread's folder.
        routes.insert(WRITE_ASSET.to_string(), Route::WriteAsset);
        if let Some(dir) = files.assets_dir() {
            definitions.push(function(
                WRITE_ASSET,
                &format!(
                    "Save a text file for the user into this thread's assets folder ({dir}/), where the web application can fetch it. Replaces a file of the same name."
                ),
                json!({"type": "object", "properties": {
                    "name": {"type": "string", "description": format!("File name, optionally with sub-folders, relative to {dir}/")},
                    "content": {"type": "string", "description": "The whole text content"}
                }, "required": ["name", "content"]}),
            ));
        }
        if web.is_some() {
            definitions.push(function(
                WEB_SEARCH,
                "Search the web (Tavily). Returns up to 5 results with title, URL and an extract.",
                json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to search for"}}, "required": ["query"]}),
            ));
            routes.insert(WEB_SEARCH.to_string(), Route::WebSearch);
        }
        if let Some(page) = &page {
            for spec in &page.tools {
                // A page tool named like a built-in is offered under a prefix
                // rather than shadowing (or being shadowed by) the built-in.
                let offered = if BUILT_IN.contains(&spec.name.as_str()) {
                    format!("page.{}", spec.name)
                } else {
                    spec.name.clone()
                };
                definitions.push(page::definition(spec, &offered));
                routes.insert(offered, Route::Page(spec.name.clone()));
            }
        }
        Toolset {
            files,
            page,
            web,
            routes,
            definitions,
        }
    }

    /// Without the tools that write ([`WRITE_ASSET`]): neither offered to
    /// the model nor served if it names them anyway.
    pub fn read_only(mut self) -> Self {
        self.routes.retain(|_, route| *route != Route::WriteAsset);
        self.definitions
            .retain(|d| d["function"]["name"].as_str() != Some(WRITE_ASSET));
        self
    }

    pub fn definitions(&self) -> &[Json] {
        &self.definitions
    }

    /// Whether the model is offered the tool `name`.
    pub fn offers(&self, name: &str) -> bool {
        self.definitions
            .iter()
            .any(|d| d["function"]["name"].as_str() == Some(name))
    }

    /// This thread's assets folder relative to the workspace (see
    /// [`files::Files::assets_dir`]).
    pub fn assets_dir(&self) -> Option<String> {
        self.files.assets_dir()
    }

    pub fn page_guidance(&self) -> Option<&str> {
        self.page
            .as_ref()
            .map(|p| p.guidance.trim())
            .filter(|g| !g.is_empty())
    }

    pub fn has_page_tools(&self) -> bool {
        self.page.as_ref().is_some_and(|p| !p.tools.is_empty())
    }

    /// Runs one call; the answer is what the model reads as the tool message.
    pub async fn call(&mut self, name: &str, args: Json) -> Json {
        match self.dispatch(name, args).await {
            Ok(result) => json!({"ok": true, "result": result}),
            Err(e) => {
                json!({"ok": false, "error": {"code": e.code().as_str(), "message": e.to_string()}})
            }
        }
    }

    async fn dispatch(&mut self, name: &str, args: Json) -> Result<Json, AgentError> {
        let route = self.routes.get(name).cloned().ok_or_else(|| {
            AgentError::tool(
                Code::TOOL_NOT_FOUND,
                format!("there is no tool named {name:?}"),
            )
        })?;
        let text = |key: &str| -> Result<String, AgentError> {
            match args.get(key) {
                Some(Json::String(s)) => Ok(s.clone()),
                None | Some(Json::Null) => Ok(String::new()),
                Some(_) => Err(AgentError::tool(
                    Code::TOOL_ARGS_INVALID,
                    format!("{key}: must be a string"),
                )),
            }
        };
        match route {
            Route::ListFiles => self.files.list(&text("path")?),
            Route::ReadFile => self.files.read(&text("path")?),
            Route::WriteAsset => self.files.write_asset(&text("name")?, &text("content")?),
            Route::WebSearch => match &self.web {
                Some(web) => web.search(&text("query")?).await,
                None => Err(AgentError::tool(
                    Code::TOOL_NOT_FOUND,
                    "web search is not configured",
                )),
            },
            Route::Page(tool) => match &mut self.page {
                Some(page) => page.call(&tool, args).await,
                None => Err(AgentError::tool(
                    Code::TOOL_NOT_FOUND,
                    "the page offers no tools",
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THREAD: &str = "thr_0123456789abcdef";

    fn names(t: &Toolset) -> Vec<String> {
        t.definitions()
            .iter()
            .map(|d| d["function"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn files(dir: &tempfile::TempDir, thread: Option<&str>) -> files::Files {
        files::Files::new(dir.path().to_path_buf(), thread)
    }

    #[tokio::test]
    async fn web_search_is_offered_only_with_a_key_and_unknown_tools_answer_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut bare = Toolset::new(files(&dir, Some(THREAD)), None, None);
        assert_eq!(names(&bare), [LIST_FILES, READ_FILE, WRITE_ASSET]);
        let answer = bare.call(WEB_SEARCH, json!({"query": "x"})).await;
        assert_eq!(answer["error"]["code"], "TOOL_NOT_FOUND");
        let answer = bare.call(READ_FILE, json!({"path": 3})).await;
        assert_eq!(answer["error"]["code"], "TOOL_ARGS_INVALID");

        let web = web::WebSearch {
            http: crate::http::Http::new(None).unwrap(),
            endpoint: "http://127.0.0.1:9".into(),
            key: "k".into(),
        };
        let with = Toolset::new(files(&dir, Some(THREAD)), None, Some(web));
        assert_eq!(
            names(&with),
            [LIST_FILES, READ_FILE, WRITE_ASSET, WEB_SEARCH]
        );
    }

    #[tokio::test]
    async fn write_asset_names_the_threads_folder_and_needs_a_thread() {
        let dir = tempfile::tempdir().unwrap();
        let tools = Toolset::new(files(&dir, Some(THREAD)), None, None);
        let write = &tools.definitions()[2]["function"];
        assert_eq!(write["name"], WRITE_ASSET);
        let folder = format!(".pedelec-runtime/assets/{THREAD}/");
        assert!(
            write["description"].as_str().unwrap().contains(&folder),
            "{write}"
        );

        let mut no_thread = Toolset::new(files(&dir, None), None, None);
        assert_eq!(names(&no_thread), [LIST_FILES, READ_FILE]);
        let answer = no_thread
            .call(WRITE_ASSET, json!({"name": "a.txt", "content": "x"}))
            .await;
        assert_eq!(answer["error"]["code"], "TOOL_NOT_FOUND");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("no Pedelec thread"), "{message}");
        assert!(!dir.path().join(".pedelec-runtime").exists());
    }

    #[tokio::test]
    async fn read_only_offers_and_serves_no_writing_tool() {
        let dir = tempfile::tempdir().unwrap();
        let mut tools = Toolset::new(files(&dir, Some(THREAD)), None, None).read_only();
        assert_eq!(names(&tools), [LIST_FILES, READ_FILE]);
        let answer = tools
            .call(WRITE_ASSET, json!({"name": "a.txt", "content": "x"}))
            .await;
        assert_eq!(answer["error"]["code"], "TOOL_NOT_FOUND");
        assert!(!dir.path().join(".pedelec-runtime").exists());
    }
}
